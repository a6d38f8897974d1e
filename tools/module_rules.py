"""The rules inside one package, for tools/check_imports.py: no import cycle between its
modules, and no private name of another module touched.

* **Cycles.** Every import a module makes of another module of the same distribution is
  an edge: at module level, inside a function, under ``if TYPE_CHECKING:`` alike (a cycle
  kept alive by a deferred import is still two modules that cannot be understood one
  without the other). ``from package import name`` is an edge to ``package.name`` when
  that is a module, to ``package`` otherwise; the package ``__init__`` a submodule lives
  in is not an edge by itself. Each strongly connected set of two or more modules is
  one violation, named with the imports that close it.
* **Private access.** In a module, ``expr._name`` (not ``self._name`` / ``cls._name``,
  not a dunder) where ``_name`` is defined nowhere in that module: the attribute belongs
  to another module's class or module object, so it is that module's private business.
  A name the module defines (assigns, declares, or defines as a function or class) is
  its own. ``from module import _name`` of another module's private name (not a
  private submodule) is the same reach. A few names of the standard library that are
  public despite the underscore (``os._exit``, namedtuple's ``_replace`` ...) are allowed.

    from module_rules import check_package
    violations = check_package("dsh-subagent", folder / "src")
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

RULE_CYCLE = "import cycle between modules of one package"
RULE_PRIVATE = "private name of another module"

# Public in spite of the leading underscore (the standard library's own spelling).
PUBLIC_UNDERSCORE = frozenset(
    {"_exit", "_getframe", "_Environ", "_asdict", "_replace", "_fields", "_make", "_field_defaults"}
)


@dataclass(frozen=True)
class Finding:
    """One broken rule: where, what, which rule."""

    path: str
    line: int
    module: str
    what: str
    rule: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.module} {self.what} ({self.rule})"


@dataclass(frozen=True)
class Module:
    """One source file of a package: its dotted name, whether it is a package, its text."""

    name: str
    is_package: bool
    source: str
    path: str

    @cached_property
    def tree(self) -> ast.Module:
        """The parsed source (parsed once, for every rule)."""
        return ast.parse(self.source)


def modules_of(src: Path, root: Path) -> list[Module]:
    """Every module under a distribution's ``src`` folder."""
    found: list[Module] = []
    for path in sorted(src.rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        found.append(Module(name, is_package, path.read_text(), str(path.relative_to(root))))
    return found


def _absolute(module: Module, level: int, target: str | None) -> str | None:
    parts = module.name.split(".") if module.is_package else module.name.split(".")[:-1]
    if level - 1 > len(parts) - 1:
        return None
    base = parts[: len(parts) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def _edges(module: Module, tree: ast.Module, names: set[str]) -> Iterator[tuple[int, str]]:
    """(line, module of this package) for each import of another module of the package."""
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, node.level, node.module) if node.level else (node.module or "")
            if base is None:
                continue
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                targets.append(submodule if submodule in names else base)
        for target in targets:
            # `import a.b.c` needs a.b.c; the packages above it are not edges by themselves.
            if target in names and target != module.name:
                yield node.lineno, target


def cycles(modules: Iterable[Module]) -> list[Finding]:
    """One finding per strongly connected set of two or more modules."""
    modules = list(modules)
    names = {m.name for m in modules}
    by_name = {m.name: m for m in modules}
    graph: dict[str, dict[str, int]] = {}
    for module in modules:
        try:
            tree = module.tree
        except SyntaxError:
            continue
        edges: dict[str, int] = {}
        for line, target in _edges(module, tree, names):
            edges.setdefault(target, line)
        graph[module.name] = edges

    # Tarjan, iteratively (no recursion limit on a deep package).
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))

    findings: list[Finding] = []
    for component in sorted(components):
        members = set(component)
        first = by_name[component[0]]
        closing = [
            f"{source} -> {target} (line {line})"
            for source in component
            for target, line in sorted(graph[source].items())
            if target in members
        ]
        line = min(line for target, line in graph[first.name].items() if target in members)
        findings.append(
            Finding(
                first.path,
                line,
                first.name,
                f"is in a cycle of {len(component)} modules: " + "; ".join(closing),
                RULE_CYCLE,
            )
        )
    return findings


def _defined_names(tree: ast.Module) -> set[str]:
    """Every name a module binds anywhere: attributes it stores, functions, classes, names."""
    defined: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            defined.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            defined.add(node.id)
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
        elif isinstance(node, ast.alias):
            defined.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.keyword) and node.arg:
            defined.add(node.arg)  # dataclass(field=...) / NamedTuple(...) style declarations
    return defined


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in PUBLIC_UNDERSCORE


def private_access(module: Module, known_modules: set[str]) -> list[Finding]:
    """``obj._name`` and ``from m import _name`` reaching another module's private names."""
    try:
        tree = module.tree
    except SyntaxError:
        return []
    defined = _defined_names(tree)
    # The names a module imports under its own spelling are someone else's: take them out.
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                defined.discard(alias.asname or alias.name)
    findings: list[Finding] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            if not _private(node.attr) or node.attr in defined:
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            findings.append(
                Finding(
                    module.path,
                    node.lineno,
                    module.name,
                    f"reads {ast.unparse(node)}",
                    RULE_PRIVATE,
                )
            )
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, node.level, node.module) if node.level else node.module
            for alias in node.names:
                if not _private(alias.name) or f"{base}.{alias.name}" in known_modules:
                    continue
                if base == module.name:
                    continue
                findings.append(
                    Finding(
                        module.path,
                        node.lineno,
                        module.name,
                        f"imports {alias.name} from {base}",
                        RULE_PRIVATE,
                    )
                )
    return findings


def check_package(src: Path, root: Path, known_modules: set[str] | None = None) -> list[Finding]:
    """Both rules over one distribution's ``src`` folder."""
    modules = modules_of(src, root)
    names = {m.name for m in modules} | (known_modules or set())
    findings = cycles(modules)
    for module in modules:
        findings += private_access(module, names)
    return findings


# --- self-test ------------------------------------------------------------------------


def _mods(files: dict[str, str]) -> list[Module]:
    out = []
    for name, source in files.items():
        is_package = name.endswith(".__init__")
        dotted = name.removesuffix(".__init__")
        out.append(Module(dotted, is_package, source, f"<{name}>"))
    return out


# (files of one package, rules that must be found: empty means clean)
SELF_TEST_CASES: list[tuple[dict[str, str], set[str]]] = [
    ({"p.a": "from p.b import B\n", "p.b": "from p.a import A\n"}, {RULE_CYCLE}),
    (
        {
            "p.a": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p.b import B\n",
            "p.b": "def f():\n    from p.c import C\n",
            "p.c": "import p.a\n",
        },
        {RULE_CYCLE},
    ),
    (
        {"p.__init__": "from p._a import A\n", "p._a": "from . import _b\n", "p._b": "X = 1\n"},
        set(),
    ),
    ({"p.__init__": "from p.a import A\n", "p.a": "from p import helper\n"}, {RULE_CYCLE}),
    ({"p.a": "def f(h):\n    return h._settled\n"}, {RULE_PRIVATE}),
    ({"p.a": "def f(r):\n    return r._admission._runtime\n"}, {RULE_PRIVATE}),
    ({"p.a": "from p.b import _helper\n", "p.b": "def _helper(): ...\n"}, {RULE_PRIVATE}),
    (
        {
            "p.a": "class A:\n    def __init__(self):\n        self._x = 1\n"
            "    def same(self, other: 'A'):\n        return other._x\n"
        },
        set(),
    ),
    ({"p.a": "import os\nos._exit(0)\nclass T(tuple):\n    pass\n"}, set()),
    ({"p.a": "from p import _b\n", "p._b": "X = 1\n", "p.__init__": ""}, set()),
    ({"p.a": "def f(x):\n    return x.__class__\n"}, set()),
]


def self_test() -> list[str]:
    """The failures of the self-test cases (empty: all pass)."""
    failures: list[str] = []
    for files, expected in SELF_TEST_CASES:
        modules = _mods(files)
        names = {m.name for m in modules}
        found = cycles(modules)
        for module in modules:
            found += private_access(module, names)
        rules = {f.rule for f in found}
        if rules != expected:
            failures.append(
                f"{files!r}\n    expected {sorted(expected) or 'nothing'}, "
                f"got {[str(f) for f in found] or 'nothing'}"
            )
    return failures
