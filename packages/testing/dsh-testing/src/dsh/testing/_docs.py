"""The code behind :mod:`dsh.testing.docs` (its docstring says what it is)."""

from __future__ import annotations

import os
import re
import sys
import types
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "CodeBlock",
    "extract_blocks",
    "extract_python_blocks",
    "run_python_blocks",
    "source_region",
]

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*?)\s*$")
_SOURCE = re.compile(r"^\s*<!--\s*source:\s*(?P<source>\S+)\s*-->\s*$")
PYTHON = frozenset(("python", "py", "python3"))


@dataclass(frozen=True)
class CodeBlock:
    """One fenced code block of a Markdown page."""

    path: Path
    """The page."""
    line: int
    """Line (1-based) of the block's first code line in the page."""
    language: str
    """The first word of the fence's info string (``""`` for none)."""
    code: str
    """The code, the fence's indentation removed; ends with a newline unless empty."""
    source: str | None = None
    """``path#region`` from a ``<!-- source: ... -->`` comment right before the fence."""

    @property
    def where(self) -> str:
        """``page:line`` for messages."""
        return f"{self.path}:{self.line}"


def extract_blocks(
    path: str | os.PathLike[str], languages: Iterable[str] | None = None
) -> list[CodeBlock]:
    """The fenced code blocks of the Markdown page at ``path``, in order (only those in
    ``languages``, if given). An unclosed fence runs to the end of the page, as in
    CommonMark."""
    page = Path(path)
    wanted = None if languages is None else {language.lower() for language in languages}
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[CodeBlock] = []
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None or (opening["fence"][0] == "`" and "`" in opening["info"]):
            index += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        language = opening["info"].split()[0].lower() if opening["info"] else ""
        previous = next((line for line in reversed(lines[:index]) if line.strip()), "")
        source = _SOURCE.match(previous)
        body: list[str] = []
        index += 1
        first = index + 1
        while index < len(lines):
            closing = _FENCE.match(lines[index])
            if (
                closing is not None
                and not closing["info"]
                and closing["fence"][0] == fence[0]
                and len(closing["fence"]) >= len(fence)
            ):
                break
            line = lines[index]
            strip = len(line) - len(line.lstrip(" "))
            body.append(line[min(strip, indent) :])
            index += 1
        index += 1
        if wanted is None or language in wanted:
            code = "\n".join(body) + "\n" if body else ""
            blocks.append(
                CodeBlock(page, first, language, code, source["source"] if source else None)
            )
    return blocks


def extract_python_blocks(path: str | os.PathLike[str]) -> list[CodeBlock]:
    """The ``python`` (``py``, ``python3``) blocks of the Markdown page at ``path``."""
    return extract_blocks(path, PYTHON)


def source_region(path: str | os.PathLike[str], region: str) -> str:
    """The lines of ``path`` between ``# --8<-- [start:<region>]`` and
    ``# --8<-- [end:<region>]`` (markers and blank lines around the region excluded);
    ValueError if there is no such region."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    start = re.compile(rf"^\s*#\s*--8<--\s*\[start:{re.escape(region)}\]\s*$")
    end = re.compile(rf"^\s*#\s*--8<--\s*\[end:{re.escape(region)}\]\s*$")
    begin = next((i for i, line in enumerate(lines) if start.match(line)), None)
    if begin is None:
        raise ValueError(f"{path}: no region {region!r} (# --8<-- [start:{region}])")
    finish = next((i for i in range(begin + 1, len(lines)) if end.match(lines[i])), None)
    if finish is None:
        raise ValueError(f"{path}: region {region!r} is not closed (# --8<-- [end:{region}])")
    return "\n".join(lines[begin + 1 : finish]).strip("\n") + "\n"


def run_python_blocks(
    blocks: Iterable[CodeBlock], *, module: str = "__docs_sample__"
) -> dict[str, Any]:
    """Execute ``blocks`` in order in one fresh module called ``module`` (registered in
    ``sys.modules`` while they run, so dataclasses, pydantic and pickling find it);
    returns the module's namespace. An exception propagates with a note naming the
    block, and its traceback shows the page's own lines."""
    namespace = types.ModuleType(module)
    previous = sys.modules.get(module)
    sys.modules[module] = namespace
    try:
        for block in blocks:
            padded = "\n" * (block.line - 1) + block.code  # page line numbers in tracebacks
            code = compile(padded, str(block.path), "exec")
            try:
                exec(code, namespace.__dict__)
            except BaseException as exc:
                exc.add_note(f"in the python block at {block.where}")
                raise
    finally:
        if previous is None:
            sys.modules.pop(module, None)
        else:
            sys.modules[module] = previous
    return namespace.__dict__
