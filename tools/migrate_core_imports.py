"""Rewrite imports of names that left ``dsh.core`` for its topic modules.

``dsh.core`` exports a short front door; every other public name lives in one topic
module (``dsh.core.models``, ``dsh.core.plugins`` ...; ``dsh.core.__doc__`` lists
them). The old imports still work but warn. This script rewrites them, in Python files
and in Markdown (code samples and prose) alike:

* ``from dsh.core import A, B`` statements, on one line or in parentheses over several,
  at any indentation (including in code held in strings, as long as the statement
  starts its line): the names that stayed keep ``from dsh.core import``, each moved
  name goes to ``from dsh.core.<topic> import``, one statement per module, in module
  order, ``as`` aliases kept;
* references ``dsh.core.Name`` (docstring roles such as ``:class:`~dsh.core.SandboxPolicy```,
  Markdown text) become ``dsh.core.<topic>.Name``, and ``dsh.core:Name`` (entry points,
  the docs' config-table markers) becomes ``dsh.core.<topic>:Name``.

Run ``ruff check --fix --select I`` and ``ruff format`` afterwards: they merge a
rewritten statement with an existing import of the same module and sort the block.

    uv run --frozen --no-sync python tools/migrate_core_imports.py [--check] [PATH ...]

PATH is a file or a folder (default: the repository's packages/, tests-integration/,
tools/, docs/ and README.md; folders whose name starts with ``.`` are skipped, and so
are ``dsh/core/__init__.py``, which defines the fallback, this script, and the test that
imports old paths on purpose). ``--check`` rewrites nothing and exits 1 when a file
would change. Needs dsh-core installed (it
reads the ``__all__`` of ``dsh.core`` and of its public submodules).
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import dsh.core

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PATHS = ("packages", "tests-integration", "tools", "docs", "README.md")
SUFFIXES = (".py", ".md")
LINE_LENGTH = 100
SKIPPED = (
    Path("packages/core/dsh-core/src/dsh/core/__init__.py"),
    Path("tools/migrate_core_imports.py"),
    Path("packages/core/dsh-core/tests/test_public_names.py"),  # old imports on purpose
)

# `from dsh.core import ...` at the start of a line: parenthesized (any number of
# lines) or the rest of the line (a trailing comment is kept on the first statement).
STATEMENT = re.compile(
    r"^(?P<indent>[ \t]*)from dsh\.core import "
    r"(?:\((?P<block>[^)]*)\)|(?P<line>[^\n(#]*?))(?P<comment>[ \t]*#[^\n]*)?$",
    re.MULTILINE,
)
# `dsh.core.Name`, and `dsh.core:Name` (the module:attribute form of entry points and
# of the docs' config-table markers).
REFERENCE = re.compile(r"\bdsh\.core(?P<sep>[.:])(?P<name>[A-Za-z_][A-Za-z0-9_]*)\b")


def moved_names() -> dict[str, str]:
    """Every name a public submodule of ``dsh.core`` exports and ``dsh.core`` does not,
    mapped to that submodule (a name ``dsh.core`` never had is never imported from it,
    so the submodules that are not topic modules add nothing wrong)."""
    moved: dict[str, str] = {}
    for info in pkgutil.iter_modules(dsh.core.__path__, "dsh.core."):
        if info.name.rpartition(".")[2].startswith("_"):
            continue
        module = importlib.import_module(info.name)
        for name in getattr(module, "__all__", ()):
            if name not in dsh.core.__all__:
                moved[name] = module.__name__
    return moved


def statements(indent: str, items: list[str], moved: dict[str, str]) -> str:
    """The statements that import ``items`` (``name`` or ``name as alias``) from their
    new homes: ``dsh.core`` first, then the topic modules in order; each on one line
    when it fits, else in parentheses, one name a line."""
    by_module: dict[str, list[str]] = {}
    for item in items:
        module = moved.get(item.split(" as ")[0].strip(), "dsh.core")
        by_module.setdefault(module, []).append(item)
    lines: list[str] = []
    for module in sorted(by_module):
        names = by_module[module]
        one_line = f"{indent}from {module} import {', '.join(names)}"
        if len(one_line) <= LINE_LENGTH:
            lines.append(one_line)
        else:
            body = "".join(f"{indent}    {name},\n" for name in names)
            lines.append(f"{indent}from {module} import (\n{body}{indent})")
    return "\n".join(lines)


def rewrite(text: str, moved: dict[str, str]) -> str:
    """``text`` with every import and reference of a moved name rewritten."""

    def statement(match: re.Match[str]) -> str:
        raw = match["block"] if match["block"] is not None else match["line"]
        items = [" ".join(item.split()) for item in raw.split(",") if item.strip()]
        if not any(item.split(" as ")[0] in moved for item in items):
            return match[0]
        new = statements(match["indent"], items, moved)
        if match["comment"]:
            first, newline, rest = new.partition("\n")
            new = first + match["comment"] + newline + rest
        return new

    def reference(match: re.Match[str]) -> str:
        name = match["name"]
        return f"{moved[name]}{match['sep']}{name}" if name in moved else match[0]

    return REFERENCE.sub(reference, STATEMENT.sub(statement, text))


def files(paths: list[Path]) -> Iterator[Path]:
    """The Python and Markdown files under ``paths``, hidden folders left out."""
    for path in paths:
        if path.is_file():
            yield path
            continue
        for found in sorted(path.rglob("*")):
            relative = found.relative_to(path)
            if any(part.startswith(".") for part in relative.parts[:-1]):
                continue
            if found.suffix in SUFFIXES and found.is_file():
                yield found


def main(argv: list[str] | None = None) -> int:
    """Rewrite (or, with --check, list) the files that import a moved name."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if stale")
    parser.add_argument("paths", nargs="*", type=Path)
    args = parser.parse_args(argv)
    paths: list[Path] = args.paths or [ROOT / p for p in DEFAULT_PATHS]
    skipped = {(ROOT / s).resolve() for s in SKIPPED}
    moved = moved_names()
    changed = 0
    for path in files(paths):
        if path.resolve() in skipped:
            continue
        text = path.read_text(encoding="utf-8")
        new = rewrite(text, moved)
        if new != text:
            changed += 1
            print(path)
            if not args.check:
                path.write_text(new, encoding="utf-8")
    verb = "would change" if args.check else "rewrote"
    print(f"migrate_core_imports: {verb} {changed} file(s)", file=sys.stderr)
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
