"""Shell samples, for check_samples.py: every command of a block names what exists
(``dsh ...`` parses with dsh's own parser, repository scripts exist and know their
options, ``pip install dsh-...`` names a distribution and its extras, test paths exist);
other programs' commands are listed in :data:`EXTERNAL`."""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import io
import os
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from samples_page import ROOT, PageReport, Sample

SHELL = {"sh", "bash", "shell", "console"}
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# Programs that are not this repository's: their commands are shown, not checked.
EXTERNAL = {
    "cd", "echo", "export", "which", "cat", "mkdir", "git", "curl", "jq", "openssl",
    "docker", "npm", "npx", "node", "codex", "claude", "temporal", "sleep", "kill",
}  # fmt: skip


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
        " add it to EXTERNAL in tools/docs/samples_shell.py"
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
