"""What a documentation page holds, for check_samples.py: its fenced blocks
(:class:`Sample`, with the fence's info string and the HTML comments before it), and the
report of checking them (:class:`PageReport` of :class:`Outcome`)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE_TIMEOUT = float(os.environ.get("DSH_DOCS_PAGE_TIMEOUT", "240"))

NOT_RUN = re.compile(r"^\s*(?:#|//)\s*not run:\s*(?P<reason>.*?)\s*$")
COMMENT = re.compile(r"^\s*<!--\s*(?P<text>.*?)\s*-->\s*$")
FENCE = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*?)\s*$")
CREDENTIALS = re.compile(r"(API_KEY|_TOKEN|BASE_URL)$")


@dataclass
class Sample:
    """One fenced block and what the page says about it."""

    page: Path
    line: int  # first code line, 1-based
    language: str
    info: str  # the whole info string of the fence
    code: str
    comments: list[str]  # the HTML comments right before the fence, nearest last

    @property
    def where(self) -> str:
        return f"{rel(self.page)}:{self.line}"

    def comment(self, key: str) -> str | None:
        for text in self.comments:
            name, sep, value = text.partition(":")
            if sep and name.strip() == key:
                return value.strip()
        return None

    @property
    def not_run(self) -> str | None:
        """The reason given for not running it, if the block is marked."""
        first = self.code.splitlines()[0] if self.code.strip() else ""
        marked = NOT_RUN.match(first)
        if marked:
            return marked["reason"]
        return self.comment("not run")

    @property
    def title(self) -> str | None:
        found = re.search(r"title=\"([^\"]*)\"", self.info)
        return found[1] if found else None


def samples(page: Path) -> list[Sample]:
    """The fenced blocks of ``page`` (through dsh.testing.docs.extract_blocks), with their
    fence's info string and the HTML comments right before the fence."""
    from dsh.testing.docs import extract_blocks

    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Sample] = []
    for block in extract_blocks(page):
        fence = block.line - 2  # index of the opening fence line
        opening = FENCE.match(lines[fence].strip())
        comments: list[str] = []
        index = fence - 1
        while index >= 0 and (not lines[index].strip() or COMMENT.match(lines[index])):
            matched = COMMENT.match(lines[index])
            if matched:
                comments.insert(0, matched["text"])
            index -= 1
        info = opening["info"] if opening else ""
        found.append(Sample(page, block.line, block.language, info, block.code, comments))
    return found


# -- results ---------------------------------------------------------------------------


@dataclass
class Outcome:
    where: str
    language: str
    how: str  # run, loaded, parsed, checked, output, not run, skipped, unchecked
    ok: bool
    detail: str = ""


@dataclass
class PageReport:
    page: str
    outcomes: list[Outcome] = field(default_factory=list)
    output: str = ""
    seconds: float = 0.0

    def add(self, sample: Sample, how: str, ok: bool = True, detail: str = "") -> None:
        self.outcomes.append(Outcome(sample.where, sample.language, how, ok, detail))


def rel(path: Path) -> str:
    """``path`` relative to the repository (as given when outside it)."""
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def sample_env(scratch: Path) -> dict[str, str]:
    """The environment samples run with: this one without credentials, a HOME (and the
    workspace trust store) in the scratch directory."""
    env = {k: v for k, v in os.environ.items() if not CREDENTIALS.search(k)}
    env["HOME"] = str(scratch / "home")
    env["DSH_STATE_DIR"] = str(scratch / "home" / "state")  # workspace trust: the scratch's
    return env
