"""Generate the config tables of the documentation from the pydantic models, and check them.

    python tools/docs/config_tables.py --check [PAGE ...]   (default: README.md, docs/**/*.md)
    python tools/docs/config_tables.py --write [PAGE ...]

A table lives between two HTML comments (invisible on the site)::

    <!-- config-table: dsh.subagent_acp:AcpProviderConfig -->
    | key | type | default | meaning |
    ...
    <!-- /config-table -->

and is generated from the model named ``module:Class``: one row per field, in the order
a reader wants them (required fields first, then the model's own, then those it
inherits, nearest base first), with the TOML key, the type, the default as the model
has it (``900.0``, not "none"; a byte count also in KiB or MiB) and the field's
docstring (the string right under the field, read from the source with :mod:`ast`, as
mkdocstrings' griffe reads it). Options after the target, separated by spaces:

* ``prefix=pool.`` -- written before every key (a nested table's rows);
* ``only=a,b`` -- only these fields, in this order;
* ``exclude=a,b`` -- every field but these.

A model may have several tables on one page (``only=`` splits it, e.g. by transport);
together they must list every field of the model that is not excluded, so a field
added to a model cannot go undocumented. A field without a docstring, a marker without
its end, or an unknown model or field fails too.

``--check`` exits 1 when any table differs from what its model generates, naming the
page, the line and the model, with a diff; ``--write`` rewrites the tables. tools/docs.sh
runs ``--check`` before every build (``tools/docs.sh tables`` runs ``--write``).
"""

from __future__ import annotations

import argparse
import ast
import difflib
import enum
import importlib
import inspect
import json
import re
import sys
import textwrap
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

BEGIN = re.compile(r"^<!--\s*config-table:\s*(?P<target>[\w.]+:[\w.]+)(?P<options>.*?)\s*-->\s*$")
END = re.compile(r"^<!--\s*/config-table\s*-->\s*$")
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
OPTION = re.compile(r"^(?P<key>prefix|only|exclude)=(?P<value>\S+)$")
HEADER = ["| key | type | default | meaning |", "|---|---|---|---|"]
ROLE = re.compile(r":(?:class|func|meth|attr|mod|data|exc|obj):`~?(?P<name>[^`]+)`")


class TableError(Exception):
    """A marker, a model or a field that cannot give a table (the message says why)."""


@dataclass(frozen=True)
class Spec:
    """One marker: which model, and how its table is cut."""

    target: str
    prefix: str = ""
    only: tuple[str, ...] | None = None
    exclude: tuple[str, ...] = ()

    @classmethod
    def parse(cls, target: str, options: str) -> Spec:
        """The spec of ``<!-- config-table: TARGET OPTIONS -->``."""
        values: dict[str, str] = {}
        for word in options.split():
            match = OPTION.match(word)
            if match is None:
                raise TableError(f"unknown option {word!r} (use prefix=, only= or exclude=)")
            values[match["key"]] = match["value"]
        only = tuple(values["only"].split(",")) if "only" in values else None
        exclude = tuple(values["exclude"].split(",")) if "exclude" in values else ()
        return cls(target, values.get("prefix", ""), only, exclude)


# -- reading the model -------------------------------------------------------------------


def load_model(target: str) -> Any:
    """The pydantic model named ``module:Class`` (``Class`` may be dotted)."""
    module_name, _, attribute = target.partition(":")
    try:
        found: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise TableError(f"cannot import {module_name}: {exc}") from None
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise TableError(f"{module_name} has no {attribute}")
        found = getattr(found, part)
    if not (inspect.isclass(found) and hasattr(found, "model_fields")):
        raise TableError(f"{target} is not a pydantic model")
    return found


def _models(model: Any) -> Iterator[Any]:
    """The model and its pydantic bases, most derived first (not BaseModel itself)."""
    for cls in model.__mro__:
        if hasattr(cls, "model_fields") and cls.__module__ != "pydantic.main":
            yield cls


def field_docs(model: Any) -> dict[str, str]:
    """Each field's docstring (the string right under it), from the most derived class
    that gives one."""
    docs: dict[str, str] = {}
    for cls in _models(model):
        try:
            source = textwrap.dedent(inspect.getsource(cls))
        except (OSError, TypeError):
            continue
        body = ast.parse(source).body[0]
        assert isinstance(body, ast.ClassDef)
        for node, following in zip(body.body, [*body.body[1:], None], strict=True):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                docs.setdefault(node.target.id, inspect.cleandoc(following.value.value))
    return docs


def field_order(model: Any) -> list[str]:
    """The order a reader wants: required fields first, then the fields the model itself
    introduces, then those of its bases, nearest base first (a field a class declares
    again stays with the base that introduced it), each in source order."""
    classes = list(_models(model))
    introduced: dict[str, int] = {}
    for depth, cls in enumerate(classes):
        for name in inspect.get_annotations(cls):
            if name in model.model_fields:
                introduced[name] = depth  # the deepest class that declares it wins
    order: list[str] = []
    for depth, cls in enumerate(classes):
        order += [
            name
            for name in inspect.get_annotations(cls)
            if introduced.get(name) == depth and name not in order
        ]
    order += [name for name in model.model_fields if name not in order]
    return sorted(order, key=lambda name: not model.model_fields[name].is_required())


# -- rendering ----------------------------------------------------------------------------


def render_type(annotation: Any) -> str:
    """A type as a reader of a preset sees it (a nested model is a ``table``)."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is type(None) or annotation is None:
        return "None"
    if origin is typing.Annotated:
        return render_type(args[0])
    if origin is typing.Literal:
        return " | ".join(json.dumps(a) if isinstance(a, str) else repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(render_type(a) for a in args)
    if inspect.isclass(annotation) and hasattr(annotation, "model_fields"):
        return "table"
    if inspect.isclass(annotation) and issubclass(annotation, enum.Enum):
        return " | ".join(json.dumps(m.value) for m in annotation)
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(render_type(a) for a in args)}]" if args else name
    if hasattr(annotation, "__value__"):  # a `type X = ...` alias
        return render_type(annotation.__value__)
    return getattr(annotation, "__name__", str(annotation).replace("typing.", ""))


_BOUNDS = (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"))
_UNITS = ((1024**3, "GiB"), (1024**2, "MiB"), (1024, "KiB"))


def render_bounds(field: Any, in_bytes: bool) -> str:
    """The field's numeric bounds (``≥ 0``, ``≤ 64``, ``≤ 64 MiB`` for a byte count),
    joined by commas."""
    found: list[str] = []
    for item in field.metadata:
        for attribute, sign in _BOUNDS:
            value = getattr(item, attribute, None)
            if value is not None:
                size = byte_size(value) if in_bytes else None
                found.append(f"{sign} {size or repr(value)}")
    return ", ".join(found)


def byte_size(value: Any) -> str | None:
    """``16 MiB`` for 16 * 1024 * 1024: a whole number of KiB, MiB or GiB; else None."""
    if isinstance(value, int) and not isinstance(value, bool):
        for size, unit in _UNITS:
            if value >= size and value % size == 0:
                return f"{value // size} {unit}"
    return None


def toml_value(value: Any) -> str:
    """``value`` written as TOML (inline tables for mappings and models)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return toml_value(value.value)
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        if "\n" in value:  # a program's source: too long for a cell
            return f'"""…""" ({value.count(chr(10)) + 1} lines)'
        return json.dumps(value, ensure_ascii=False)
    if hasattr(value, "model_dump"):
        value = value.model_dump(mode="python")
    if isinstance(value, dict):
        items = ", ".join(f"{_key(k)} = {toml_value(v)}" for k, v in value.items() if v is not None)
        return f"{{ {items} }}" if items else "{}"
    if isinstance(value, list | tuple | set | frozenset):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TableError(f"cannot write the default {value!r} as TOML")


def _key(key: Any) -> str:
    text = str(key)
    return text if re.fullmatch(r"[A-Za-z0-9_-]+", text) else json.dumps(text)


def render_default(name: str, field: Any, doc: str) -> str:
    """The default as the model has it: ``required``, ``unset`` (None), or its TOML value;
    a byte count that is a whole number of KiB/MiB/GiB says so too."""
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    if value == sys.executable:  # a default that depends on the interpreter running
        return "`sys.executable` (this Python)"
    text = f"`{toml_value(value)}`"
    size = byte_size(value) if _in_bytes(name, doc) else None
    return f"{text} ({size})" if size else text


def _in_bytes(name: str, doc: str) -> bool:
    return "byte" in name or "byte" in doc.lower()


def render_doc(doc: str) -> str:
    """A docstring as one table cell: reST roles and literals become code spans, lines
    are joined, and ``|`` outside code spans is escaped."""
    text = ROLE.sub(lambda m: f"``{m['name']}``", doc)
    text = " ".join(line.strip() for line in text.splitlines() if line.strip())
    text = text.replace("``", "`")
    parts = text.split("`")
    return "`".join(p if i % 2 else p.replace("|", "\\|") for i, p in enumerate(parts))


def table(spec: Spec) -> list[str]:
    """The markdown table of ``spec``'s model (header included)."""
    model = load_model(spec.target)
    docs = field_docs(model)
    order = field_order(model)
    for name in (*(spec.only or ()), *spec.exclude):
        if name not in model.model_fields:
            raise TableError(f"{spec.target} has no field {name!r}")
    names = list(spec.only) if spec.only is not None else order
    rows = list(HEADER)
    for name in names:
        if name in spec.exclude:
            continue
        field = model.model_fields[name]
        doc = docs.get(name)
        if not doc:
            raise TableError(
                f"{spec.target}.{name} has no docstring: write one right under the field"
                f" (in {inspect.getsourcefile(model)}); it is the table's 'meaning'"
            )
        kind = f"`{render_type(field.annotation)}`"
        bounds = render_bounds(field, _in_bytes(name, doc))
        if bounds:
            kind += f" {bounds}"
        key = f"`{spec.prefix}{field.alias or name}`"
        rows.append(f"| {key} | {kind} | {render_default(name, field, doc)} | {render_doc(doc)} |")
    return rows


# -- pages ----------------------------------------------------------------------------------


@dataclass
class Problem:
    """Something wrong at a line of a page."""

    page: Path
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.message}"


def regenerate(page: Path) -> tuple[str, list[Problem]]:
    """The page's text with every table regenerated, and the problems found (a table
    that cannot be generated is left as it is)."""
    lines = page.read_text(encoding="utf-8").split("\n")
    out: list[str] = []
    problems: list[Problem] = []
    shown: dict[str, tuple[int, set[str]]] = {}  # target -> (first line, fields shown)
    fence: str | None = None
    index = 0
    while index < len(lines):
        line = lines[index]
        out.append(line)
        index += 1
        opened = FENCE.match(line)
        if opened and (fence is None or opened.group(1).startswith(fence)):
            fence = None if fence is not None else opened.group(1)
            continue
        begin = BEGIN.match(line) if fence is None else None
        if begin is None:
            continue
        start = index
        while index < len(lines) and not END.match(lines[index]):
            index += 1
        if index == len(lines):
            problems.append(Problem(page, start, "config-table without <!-- /config-table -->"))
            out += lines[start:]
            break
        try:
            spec = Spec.parse(begin["target"], begin["options"])
            rows = table(spec)
        except TableError as exc:
            problems.append(Problem(page, start, str(exc)))
            out += lines[start:index]
            continue
        if lines[start:index] != rows:
            diff = difflib.unified_diff(lines[start:index], rows, "page", "model", lineterm="", n=0)
            problems.append(
                Problem(
                    page,
                    start,
                    f"the table of {spec.target} differs from the model"
                    " (tools/docs/config_tables.py --write rewrites it):\n"
                    + "\n".join(f"    {row}" for row in diff),
                )
            )
        out += rows
        model = load_model(spec.target)
        _, fields = shown.setdefault(spec.target, (start, set()))
        fields.update(spec.only if spec.only is not None else model.model_fields)
        fields.update(spec.exclude)
    for target, (line_number, fields) in shown.items():
        missing = [name for name in load_model(target).model_fields if name not in fields]
        if missing:
            problems.append(
                Problem(
                    page,
                    line_number,
                    f"no table on this page lists {', '.join(missing)} of {target}"
                    " (add it to an only= list, or exclude= it)",
                )
            )
    return "\n".join(out), problems


def default_pages(root: Path) -> list[Path]:
    """README.md and every page under docs/."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="exit 1 when a table has drifted")
    mode.add_argument("--write", action="store_true", help="rewrite the tables from the models")
    parser.add_argument("pages", nargs="*", type=Path, help="default: README.md, docs/**/*.md")
    args = parser.parse_args(argv)
    pages: list[Path] = args.pages or default_pages(ROOT)
    problems: list[Problem] = []
    tables = 0
    for page in pages:
        text = page.read_text(encoding="utf-8")
        new, found = regenerate(page)
        tables += sum(1 for line in text.split("\n") if BEGIN.match(line))
        if args.write:
            found = [p for p in found if "differs from the model" not in p.message]
            if new != text:
                page.write_text(new, encoding="utf-8")
                print(f"config_tables: rewrote {page}", file=sys.stderr)
        problems += found
    for problem in problems:
        print(f"FAILED {problem}")
    print(
        f"config_tables: {tables} tables in {len(pages)} pages, {len(problems)} problems",
        file=sys.stderr,
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
