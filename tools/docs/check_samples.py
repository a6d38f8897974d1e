"""Check every code sample of the documentation: run it, load it, or parse it.

    python tools/docs/check_samples.py [-v] [PAGE ...]   (default: README.md, docs/**/*.md)

What each fenced block gets (tools/docs/README.md has the reasons):

* ``python`` -- run. A page's Python blocks run in order in one namespace, as a reader
  pasting them into ``python -m asyncio`` would (top-level ``await`` and ``async with``
  work), in a scratch working directory holding tools/docs/sandbox/dsh.toml (the
  standard preset with the scripted model, trusted as ``dsh init`` trusts the file it
  writes, in a trust store of the scratch's own) and the repository's README.md. A block
  after ``<!-- source: PATH#REGION -->`` must equal that region of the file; lines
  ``--8<-- "PATH:REGION"`` are replaced by the region, as pymdownx.snippets does.
* ``toml`` -- a preset (top-level keys among ``extends``, ``agent``, ``plugin``,
  ``permissions``, ``sandbox``) is parsed with ``dsh.core.parse_preset`` and loaded with
  ``Context.open`` (every plugin row found, configured and applied); other TOML
  (``title="pyproject.toml"`` and the like) is parsed as TOML.
* ``json`` -- parsed.
* ``sh``, ``bash``, ``shell``, ``console`` -- each command is checked: ``dsh ...`` and
  ``python -m dsh.cli ...`` parse with dsh's own argument parser (the command, its
  options, its arguments); repository scripts exist and know the options given;
  ``pip install dsh-...`` names a distribution of this repository (and its extras);
  test paths exist. Commands of other programs are named in ``EXTERNAL``.
* ``text`` or no language -- output, not checked.

A block after ``<!-- recipe: NAME -->`` is a file of that name: it is written into the
scratch directory before the page's samples run, and a Python recipe is run as a
script there (``python NAME``). A block that is only illustrative says so: a first
line ``# not run: <reason>``, or ``<!-- not run: <reason> -->`` right before its fence
(for blocks whose text must stay exact). Any other block -- a Python block that cannot
run, a language without a check -- fails.

Each page runs in a subprocess of its own, bounded in time. The exit status is 1 when
any sample fails; the report names the page and line of every failure.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import contextlib
import glob
import importlib.util
import inspect
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import traceback
import types
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SANDBOX = Path(__file__).resolve().parent / "sandbox"
PAGE_TIMEOUT = float(os.environ.get("DSH_DOCS_PAGE_TIMEOUT", "240"))

SHELL = {"sh", "bash", "shell", "console"}
OUTPUT = {"", "text", "txt", "output"}
PRESET_KEYS = {"extends", "agent", "plugin", "permissions", "sandbox"}
NOT_RUN = re.compile(r"^\s*(?:#|//)\s*not run:\s*(?P<reason>.*?)\s*$")
COMMENT = re.compile(r"^\s*<!--\s*(?P<text>.*?)\s*-->\s*$")
FENCE = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*?)\s*$")
SNIPPET = re.compile(r"^\s*--8<--\s+\"(?P<path>[^\":]+)(?::(?P<region>[\w-]+))?\"\s*$")
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# Programs that are not this repository's: their commands are shown, not checked.
EXTERNAL = {
    "cd", "echo", "export", "which", "cat", "mkdir", "git", "curl", "jq", "openssl",
    "docker", "npm", "npx", "node", "codex", "claude", "temporal", "sleep", "kill",
}  # fmt: skip
CREDENTIALS = re.compile(r"(API_KEY|_TOKEN|BASE_URL)$")


# -- what a page holds ------------------------------------------------------------------


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
        return f"{_rel(self.page)}:{self.line}"

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


def _rel(path: Path) -> str:
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def _short_traceback(exc: BaseException, page: Path) -> str:
    """The exception, from the first frame on the page (the sample's own lines) on."""
    trace = traceback.TracebackException.from_exception(exc)
    frames = trace.stack
    first = next((i for i, frame in enumerate(frames) if frame.filename == str(page)), 0)
    trace.stack = traceback.StackSummary.from_list(frames[first:])
    text = "".join(trace.format())
    return text if len(text) < 4000 else "...\n" + text[-4000:]


# -- python ----------------------------------------------------------------------------


def expand_snippets(code: str, where: str) -> str:
    """Replace ``--8<-- "PATH:REGION"`` lines as pymdownx.snippets does."""
    from dsh.testing.docs import source_region

    out: list[str] = []
    for line in code.splitlines():
        matched = SNIPPET.match(line)
        if not matched:
            out.append(line)
            continue
        path = ROOT / matched["path"]
        if not path.is_file():
            raise ValueError(f"{where}: the snippet {matched['path']} does not exist")
        if matched["region"]:
            out.append(source_region(path, matched["region"]).rstrip("\n"))
        else:
            text = path.read_text(encoding="utf-8")
            out += [ln for ln in text.splitlines() if "--8<-- [" not in ln]
    return "\n".join(out) + "\n"


def check_source(sample: Sample) -> str | None:
    """For ``<!-- source: PATH#REGION -->``: why the block differs from the region."""
    from dsh.testing.docs import source_region

    source = sample.comment("source")
    if source is None:
        return None
    path, _, region = source.partition("#")
    try:
        expected = source_region(ROOT / path, region)
    except (OSError, ValueError) as exc:
        return str(exc)
    if sample.code != expected:
        return f"the block no longer shows {source}: copy the region into the page"
    return None


def run_python(blocks: list[Sample], report: PageReport) -> None:
    """Run ``blocks`` in order in one fresh module, like dsh.testing.docs.run_python_blocks
    (page line numbers in tracebacks, a note naming the block), with top-level await: a
    block that awaits runs on the page's event loop."""
    module = types.ModuleType("__docs_sample__")
    sys.modules[module.__name__] = module
    loop = asyncio.new_event_loop()
    failed = False
    try:
        for sample in blocks:
            if failed:
                report.add(sample, "skipped", detail="an earlier block of the page failed")
                continue
            try:
                code = expand_snippets(sample.code, sample.where)
                padded = "\n" * (sample.line - 1) + code
                compiled = compile(
                    padded, str(sample.page), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
                )
                given = sample.comment("run with")
                if given is not None:
                    loop.run_until_complete(in_context(compiled, module, given, sample.where))
                elif compiled.co_flags & inspect.CO_COROUTINE:
                    loop.run_until_complete(eval(compiled, module.__dict__))
                else:
                    exec(compiled, module.__dict__)
            except BaseException as exc:
                if isinstance(exc, KeyboardInterrupt):
                    raise
                exc.add_note(f"in the python block at {sample.where}")
                report.add(sample, "run", False, _short_traceback(exc, sample.page))
                failed = True
            else:
                report.add(sample, "run")
    finally:
        with contextlib.suppress(Exception):
            loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
        sys.modules.pop(module.__name__, None)


CONTEXT_NAMES = {"ctx", "parent"}


async def in_context(
    compiled: types.CodeType, module: types.ModuleType, given: str, where: str
) -> None:
    """Run a fragment that uses ``ctx`` (a context opened on ./dsh.toml) and ``parent``
    (an agent of it): ``<!-- run with: ctx, parent -->`` before the fence."""
    from dsh.core import Context, load_preset

    names = {name.strip() for name in given.split(",") if name.strip()}
    if not names or names - CONTEXT_NAMES:
        raise ValueError(f"{where}: 'run with:' takes {', '.join(sorted(CONTEXT_NAMES))}")
    async with Context.open(load_preset("dsh.toml")) as ctx:
        values = {"ctx": ctx, "parent": ctx.agents.create()}
        module.__dict__.update({name: values[name] for name in names})
        try:
            result = eval(compiled, module.__dict__)
            if inspect.iscoroutine(result):
                await result
        finally:
            for name in names:
                module.__dict__.pop(name, None)


def run_recipe(sample: Sample, name: str, scratch: Path, report: PageReport) -> None:
    env = _sample_env(scratch)
    try:
        done = subprocess.run(
            [sys.executable, name],
            cwd=scratch,
            env=env,
            capture_output=True,
            text=True,
            timeout=PAGE_TIMEOUT / 2,
            check=False,
        )
    except subprocess.TimeoutExpired:
        report.add(sample, "run", False, f"python {name} did not finish in time")
        return
    if done.returncode != 0:
        report.add(
            sample, "run", False, f"python {name} exited {done.returncode}:\n" + done.stderr[-3000:]
        )
    else:
        report.add(sample, "run", detail=f"python {name}")


# -- toml ------------------------------------------------------------------------------


def is_preset(data: dict[str, Any]) -> bool:
    return bool(data) and set(data) <= PRESET_KEYS


def preset_text(sample: Sample) -> str:
    """The sample's TOML; after ``<!-- preset: extends NAME -->``, the rows a dsh.toml
    that extends NAME adds (``extends = "NAME"`` goes first)."""
    how = sample.comment("preset")
    if how is None:
        return sample.code
    matched = re.fullmatch(r"extends\s+(\S+)", how)
    if not matched:
        raise ValueError(f"{sample.where}: '<!-- preset: extends NAME -->' expected")
    return f"extends = {json.dumps(matched[1])}\n{sample.code}"


async def load_preset_sample(text: str, scratch: Path) -> None:
    from dsh.core import Context, parse_preset

    preset = parse_preset(text, source="the sample", base_dir=scratch)
    async with Context.open(preset, cwd=scratch):
        pass


def check_toml(sample: Sample, scratch: Path, report: PageReport) -> None:
    try:
        data = tomllib.loads(sample.code)
    except tomllib.TOMLDecodeError as exc:
        report.add(sample, "parsed", False, f"not TOML: {exc}")
        return
    if not is_preset(data):
        if sample.title is None and sample.comment("recipe") is None:
            report.add(
                sample,
                "parsed",
                False,
                "TOML that is not a preset (top-level keys other than"
                f" {', '.join(sorted(PRESET_KEYS))}) must name its file:"
                ' ```toml title="pyproject.toml"```; or make it a whole preset',
            )
        else:
            report.add(sample, "parsed", detail=f"TOML ({sample.title})")
        return
    reason = sample.not_run
    if reason is not None:
        report.add(sample, "not run", detail=f"TOML parsed, not loaded: {reason}")
        return
    try:
        asyncio.run(load_preset_sample(preset_text(sample), scratch))
    except Exception as exc:
        report.add(sample, "loaded", False, f"{type(exc).__name__}: {exc}")
    else:
        report.add(sample, "loaded", detail="preset parsed and loaded")


# -- shell -----------------------------------------------------------------------------


def commands(code: str) -> Iterator[list[str]]:
    """The simple commands of a shell block: continuation lines joined, comments
    dropped, split at ``;``, ``&&``, ``||``, ``|``, redirections removed."""
    text = re.sub(r"\\\n", " ", code)
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        words: list[str] = []
        skip_next = False
        for token in lexer:
            if skip_next:
                skip_next = False
                continue
            if token in {";", "&&", "||", "|", "&"}:
                if words:
                    yield words
                words = []
            elif token in {">", ">>", "<", "2>", "2>&1", ">&"}:
                skip_next = True
            elif token in {"(", ")"}:
                continue
            else:
                words.append(token)
        if words:
            yield words


_HELP_CACHE: dict[str, str] = {}


def _script_help(script: Path) -> str:
    key = str(script)
    if key not in _HELP_CACHE:
        done = subprocess.run(
            [sys.executable, str(script), "--help"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        _HELP_CACHE[key] = done.stdout + done.stderr if done.returncode == 0 else ""
    return _HELP_CACHE[key]


def _distributions() -> dict[str, dict[str, Any]]:
    found = {}
    for pyproject in ROOT.glob("packages/*/*/pyproject.toml"):
        project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
        found[project["name"]] = project
    return found


def check_dsh(args: list[str]) -> str | None:
    """Why ``dsh ARGS`` would not parse (None when it does)."""
    from dsh.cli._main import build_parser

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            build_parser(args).parse_args(args)
    except SystemExit as exc:
        if exc.code not in (0, None):
            return f"dsh {shlex.join(args)}: {err.getvalue().strip().splitlines()[-1]}"
    return None


def check_command(words: list[str], scratch: Path) -> str | None:
    """Why the command ``words`` does not name what exists (None when it does)."""
    while words and ENV_ASSIGNMENT.match(words[0]):
        words = words[1:]
    if not words:
        return None
    program, args = words[0], words[1:]
    if program == "uv" and args[:1] == ["run"]:
        rest = args[1:]
        while rest and rest[0].startswith("-"):
            option = rest.pop(0)
            if option in {"--package", "--with", "--group", "--python", "-p", "--extra"}:
                rest = rest[1:]
        return check_command(rest, scratch)
    if (program in {"uv", "pip", "pipx"} and args[:1] in (["install"], ["tool"])) or (
        program == "uv" and args[:2] == ["pip", "install"]
    ):
        return check_install([a for a in args if a not in {"tool", "pip", "install"}])
    if program == "uv":
        return None  # uv sync, uv lock...: the workspace's own commands
    if program == "dsh":
        return check_dsh(args)
    if program in {"python", "python3"}:
        if args[:1] == ["-m"] and len(args) > 1:
            module = args[1]
            if module == "dsh.cli":
                return check_dsh(args[2:])
            if module == "pytest":
                return check_pytest(args[2:])
            if importlib.util.find_spec(module) is None:
                return f"python -m {module}: no such module"
            return None
        script = next((a for a in args if not a.startswith("-")), None)
        if script is None:
            return None
        return check_script(script, args[args.index(script) + 1 :], scratch)
    if program == "pytest":
        return check_pytest(args)
    if "/" in program:
        return check_script(program, args, scratch)
    if program in EXTERNAL:
        return None
    return (
        f"{program}: not a command this repository knows; if it is another program's,"
        " add it to EXTERNAL in tools/docs/check_samples.py"
    )


def check_install(requirements: list[str]) -> str | None:
    dists = _distributions()
    for requirement in requirements:
        if requirement.startswith("-"):
            continue
        matched = re.match(r"^([A-Za-z0-9_.-]+)(?:\[([^\]]*)\])?", requirement)
        if not matched:
            continue
        name, extras = matched[1], matched[2]
        if not name.startswith("dsh-"):
            continue  # another project's package
        if name not in dists:
            return f"pip install {requirement}: no distribution {name} in packages/*/*/"
        known = set(dists[name].get("optional-dependencies", {}))
        for extra in filter(None, (extras or "").split(",")):
            if extra.strip() not in known:
                return f"pip install {requirement}: {name} has no extra {extra!r}"
    return None


def check_pytest(args: list[str]) -> str | None:
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in {"-k", "-p", "-m", "-n", "--timeout"}:
            skip = True
            continue
        if arg.startswith("-"):
            continue
        path = arg.split("::")[0]
        if not glob.glob(str(ROOT / path)):
            return f"pytest {arg}: no such path"
    return None


def check_script(script: str, args: list[str], scratch: Path) -> str | None:
    path = scratch / script if (scratch / script).exists() else ROOT / script
    if not path.exists():
        return f"{script}: no such file in the repository"
    if path.suffix == ".sh" or path.suffix == "":
        if not os.access(path, os.X_OK):
            return f"{script}: not executable"
        return None
    if path.suffix == ".py" and path.is_relative_to(ROOT / "tools"):
        options = [a.split("=")[0] for a in args if a.startswith("--")]
        if options:
            text = _script_help(path)
            missing = [o for o in options if o not in text]
            if missing:
                return f"{script}: does not know {', '.join(missing)} (see its --help)"
    return None


def check_shell(sample: Sample, scratch: Path, report: PageReport) -> None:
    problems = []
    count = 0
    for words in commands(sample.code):
        count += 1
        problem = check_command(words, scratch)
        if problem:
            problems.append(problem)
    if problems:
        report.add(sample, "checked", False, "\n".join(problems))
    else:
        report.add(sample, "checked", detail=f"{count} command(s)")


# -- one page --------------------------------------------------------------------------


def _sample_env(scratch: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not CREDENTIALS.search(k)}
    env["HOME"] = str(scratch / "home")
    env["DSH_STATE_DIR"] = str(scratch / "home" / "state")  # workspace trust: the scratch's
    return env


def trust_sandbox(scratch: Path) -> None:
    """Trust the scratch's dsh.toml as ``dsh init`` trusts the file it writes, so a
    sample's ``find_preset()`` reads it (run with the sample environment in place)."""
    from dsh.core import trust_preset

    trust_preset(scratch / "dsh.toml")


def prepare_scratch(scratch: Path) -> None:
    shutil.copy(SANDBOX / "dsh.toml", scratch / "dsh.toml")
    shutil.copy(ROOT / "README.md", scratch / "README.md")
    (scratch / "home").mkdir(exist_ok=True)


def check_page(page: Path) -> PageReport:
    """Check every sample of ``page`` (in this process; the caller isolates pages)."""
    report = PageReport(_rel(page))
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="dsh-docs-") as tmp:
        scratch = Path(tmp)
        prepare_scratch(scratch)
        found = samples(page)
        recipes: list[tuple[Sample, str]] = []
        for sample in found:  # recipe files first: the page's samples may read them
            name = sample.comment("recipe")
            if name is not None:
                (scratch / name).write_text(sample.code, encoding="utf-8")
                recipes.append((sample, name))
        python: list[Sample] = []
        for sample in found:
            reason = sample.not_run
            language = sample.language
            recipe = sample.comment("recipe")
            if language in OUTPUT:
                report.add(sample, "output")
            elif reason is not None and language != "toml":
                if not reason:
                    report.add(sample, "not run", False, "'not run:' needs a reason")
                else:
                    report.add(sample, "not run", detail=reason)
            elif language == "python":
                problem = check_source(sample)
                if problem:
                    report.add(sample, "run", False, problem)
                elif recipe is not None:
                    run_recipe(sample, recipe, scratch, report)
                else:
                    python.append(sample)
            elif language == "toml":
                check_toml(sample, scratch, report)
            elif language == "json":
                try:
                    json.loads(sample.code)
                except json.JSONDecodeError as exc:
                    report.add(sample, "parsed", False, f"not JSON: {exc}")
                else:
                    report.add(sample, "parsed", detail="JSON")
            elif language in SHELL:
                check_shell(sample, scratch, report)
            else:
                report.add(
                    sample,
                    "unchecked",
                    False,
                    f"no check for {language!r} blocks: mark it '<!-- not run: reason -->'"
                    " or add a check to tools/docs/check_samples.py",
                )
        if python:
            previous = Path.cwd()
            old_env = dict(os.environ)
            os.chdir(scratch)
            os.environ.clear()
            os.environ.update(_sample_env(scratch))
            try:
                trust_sandbox(scratch)
                run_python(python, report)
            finally:
                os.chdir(previous)
                os.environ.clear()
                os.environ.update(old_env)
    report.outcomes.sort(key=lambda o: int(o.where.rsplit(":", 1)[1]))
    report.seconds = time.perf_counter() - started
    return report


# -- many pages ------------------------------------------------------------------------


def default_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _await_watchdog(owner: int, timeout: float = 10.0) -> None:
    """Wait until the dsh watchdog of the page's worker (started with the first child
    process a sample spawned) has swept up after the worker and exited, so the checker
    leaves no process behind. Linux only (/proc); elsewhere it returns at once."""
    proc = Path("/proc")
    if not proc.is_dir():
        return
    marker = f"dsh-watchdog {owner}".encode()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = False
        for entry in proc.iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if marker + b"." in cmdline or cmdline.rstrip().endswith(marker):
                alive = True
                break
        if not alive:
            return
        time.sleep(0.05)


def check_in_subprocess(page: Path) -> PageReport:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as out:
        result = Path(out.name)
    try:
        with subprocess.Popen(
            [sys.executable, __file__, "--page", str(page), "--report", str(result)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        ) as worker:
            try:
                output, _ = worker.communicate(timeout=PAGE_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, 9)
                worker.communicate()
                raise
            finally:
                _await_watchdog(worker.pid)
        done = subprocess.CompletedProcess(worker.args, worker.returncode, output, "")
        if done.returncode != 0 or not result.stat().st_size:
            report = PageReport(_rel(page), output=output)
            report.outcomes.append(
                Outcome(_rel(page), "", "run", False, f"the checker exited {done.returncode}")
            )
            return report
        data = json.loads(result.read_text())
        report = PageReport(data["page"], [Outcome(**o) for o in data["outcomes"]], output)
        report.seconds = data["seconds"]
        return report
    except subprocess.TimeoutExpired as exc:
        report = PageReport(_rel(page), output=str(exc.stdout or "") + str(exc.stderr or ""))
        report.outcomes.append(
            Outcome(_rel(page), "", "run", False, f"did not finish within {PAGE_TIMEOUT:.0f} s")
        )
        return report
    finally:
        result.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pages", nargs="*", type=Path, help="default: README.md, docs/**/*.md")
    parser.add_argument("-v", "--verbose", action="store_true", help="list every sample")
    parser.add_argument("-j", "--jobs", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--page", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--report", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.page is not None:  # the worker: one page, in this process
        report = check_page(args.page)
        args.report.write_text(json.dumps(asdict(report)))
        return 0

    pages = [p.resolve() for p in args.pages] or default_pages()
    missing = [p for p in pages if not p.is_file()]
    if missing:
        parser.error(f"no such page: {', '.join(map(str, missing))}")
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        reports = list(pool.map(check_in_subprocess, pages))
    totals: dict[str, int] = {}
    failures = 0
    for report in reports:
        bad = [o for o in report.outcomes if not o.ok]
        failures += len(bad)
        for outcome in report.outcomes:
            totals[outcome.how] = totals.get(outcome.how, 0) + 1
        if args.verbose or bad:
            summary = ", ".join(
                f"{sum(o.how == how for o in report.outcomes)} {how}"
                for how in dict.fromkeys(o.how for o in report.outcomes)
            )
            print(f"{report.page}: {summary or 'no samples'} ({report.seconds:.1f} s)")
        if args.verbose:
            for outcome in report.outcomes:
                mark = "ok  " if outcome.ok else "FAIL"
                first = outcome.detail.splitlines()[0] if outcome.detail else ""
                print(f"  {mark} {outcome.where} [{outcome.language or '-'}] {outcome.how} {first}")
        for outcome in bad:
            print(f"FAILED {outcome.where} [{outcome.language or '-'}] {outcome.how}:")
            print("  " + outcome.detail.replace("\n", "\n  "))
        if bad and report.output.strip():
            print(
                f"  output of {report.page}:\n    " + report.output[-3000:].replace("\n", "\n    ")
            )
    counted = ", ".join(f"{n} {how}" for how, n in sorted(totals.items()))
    print(
        f"samples: {len(reports)} pages, {sum(totals.values())} blocks ({counted});"
        f" {failures} failed, in {time.perf_counter() - started:.1f} s"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
