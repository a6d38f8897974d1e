"""The import rules between distributions, for tools/check_imports.py.

Parses every .py file under packages/*/*/src with ``ast`` and looks at each import
it can resolve: ``import`` and ``from ... import`` anywhere (module level, inside
functions, under ``if TYPE_CHECKING:``), relative imports, and
``importlib.import_module`` / ``__import__`` called with a string literal (or a
module-level string constant), also when ``import_module`` is handed to another
call followed by the literal (``anyio.to_thread.run_sync(importlib.import_module,
"dsh.x")``). A dsh.* module belongs to a distribution by the naming rule
(``dsh.a_b_c`` is ``dsh-a-b-c``). The rules:

* no provider imports another provider (providers as derived by
  check_dependency_rule.py; dsh.subagent_in_process_driver is a shared helper,
  not a provider, and spawn and fork may import it);
* the interface (dsh.subagent), and the provider kit (KIT in check_dependency_rule.py,
  e.g. dsh.subprocess) when present, import no provider and no dsh.tool_* package;
* tool packages (dsh.tool_*) import no provider;
* dsh.core imports no other dsh package;
* every dsh.* module a package imports is its own or belongs to a declared runtime
  dependency of its distribution (``dependencies`` or an extra; dev groups do not
  count), so an undeclared dependency fails.

Each violation is printed as ``path:line: <module> imports <other> (<rule>)``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from check_dependency_rule import INTERFACE, KIT, providers
from check_workspace import ROOT, discover, distribution_of

CORE = "dsh-core"
TOOL_PREFIX = "dsh-tool-"

# Imports that the rules flag but that are correct, as (importing distribution,
# imported distribution, why). Keep it minimal; each entry needs its reason.
EXCEPTIONS: set[tuple[str, str, str]] = set()

RULE_PROVIDER = "no provider imports another provider"
RULE_INTERFACE = "the interface and the kit import no provider and no tool"
RULE_TOOL = "tools import no provider"
RULE_CORE = "dsh.core imports no other dsh package"
RULE_DECLARED = "undeclared dependency"


@dataclass(frozen=True)
class Workspace:
    """What the rules need to know about the distributions."""

    dependencies: dict[str, set[str]]  # distribution -> declared runtime dependencies
    providers: set[str]
    dev_dependencies: dict[str, set[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Violation:
    path: str
    line: int
    module: str
    imported: str
    rule: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.module} imports {self.imported} ({self.rule})"


# --- collecting imports ---------------------------------------------------------------


def _resolve_relative(module: str, is_package: bool, level: int, target: str | None) -> str | None:
    """The absolute name of a relative import, or None when it climbs above the top."""
    parts = module.split(".") if is_package else module.split(".")[:-1]
    if level - 1 > len(parts) - 1:
        return None
    base = parts[: len(parts) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def _module_constants(tree: ast.Module) -> dict[str, str]:
    """Module-level names bound exactly once, to a string literal."""
    seen: dict[str, int] = {}
    values: dict[str, str] = {}
    for node in tree.body:
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign):
            targets, value = [node.target], node.value
        for target in targets:
            if isinstance(target, ast.Name):
                seen[target.id] = seen.get(target.id, 0) + 1
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    values[target.id] = value.value
    return {name: value for name, value in values.items() if seen[name] == 1}


def imports(source: str, module: str, is_package: bool) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) of every import in `source` that can be resolved.

    `module` is the dotted name of the file (`dsh.x.y` for dsh/x/y.py, `dsh.x` for
    dsh/x/__init__.py with is_package True).
    """
    tree = ast.parse(source)
    constants = _module_constants(tree)
    importlib_names = {"importlib"}  # names bound to the importlib module
    import_module_names: set[str] = set()  # names bound to importlib.import_module
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "importlib":
                    importlib_names.add(alias.asname or alias.name)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "importlib":
            for alias in node.names:
                if alias.name == "import_module":
                    import_module_names.add(alias.asname or alias.name)

    def is_import_function(expr: ast.expr) -> bool:
        if isinstance(expr, ast.Name):
            return expr.id in import_module_names or expr.id == "__import__"
        return (
            isinstance(expr, ast.Attribute)
            and expr.attr == "import_module"
            and isinstance(expr.value, ast.Name)
            and expr.value.id in importlib_names
        )

    own_package = module if is_package else module.rpartition(".")[0]
    dunders = {"__name__": module, "__package__": own_package}

    def literal(expr: ast.expr) -> str | None:
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return expr.value
        if isinstance(expr, ast.Name):
            return constants.get(expr.id, dunders.get(expr.id))
        return None

    def dynamic(name: str | None, package: str | None) -> str | None:
        if name is None:
            return None
        if name.startswith("."):
            if package is None:
                return None
            level = len(name) - len(name.lstrip("."))
            return _resolve_relative(package, True, level, name.lstrip(".") or None)
        return name

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _resolve_relative(module, is_package, node.level, node.module)
                if base is None:
                    yield node.lineno, "." * node.level + (node.module or "")
                    continue
            else:
                base = node.module or ""
            if base == "dsh":  # from dsh import core: the names are modules
                for alias in node.names:
                    yield node.lineno, f"dsh.{alias.name}"
            else:
                yield node.lineno, base
        elif isinstance(node, ast.Call):
            if is_import_function(node.func) and node.args:
                package = None
                if len(node.args) > 1:
                    package = literal(node.args[1])
                for keyword in node.keywords:
                    if keyword.arg == "package":
                        package = literal(keyword.value)
                name = dynamic(literal(node.args[0]), package)
                if name is not None:
                    yield node.lineno, name
            for index, argument in enumerate(node.args[:-1]):
                if is_import_function(argument):
                    name = dynamic(literal(node.args[index + 1]), None)
                    if name is not None:
                        yield node.lineno, name


# --- the rules ------------------------------------------------------------------------


def rules_broken(importer: str, imported: str, workspace: Workspace) -> list[str]:
    """The rules an import of distribution `imported` by distribution `importer` breaks."""
    if importer == imported:
        return []
    broken: list[str] = []
    if importer in workspace.providers and imported in workspace.providers:
        broken.append(RULE_PROVIDER)
    if (importer == INTERFACE or importer in KIT) and (
        imported in workspace.providers or imported.startswith(TOOL_PREFIX)
    ):
        broken.append(RULE_INTERFACE)
    if importer.startswith(TOOL_PREFIX) and imported in workspace.providers:
        broken.append(RULE_TOOL)
    if importer == CORE:
        broken.append(RULE_CORE)
    if imported not in workspace.dependencies:
        broken.append(f"{RULE_DECLARED}: no distribution {imported} in the workspace")
    elif imported not in workspace.dependencies.get(importer, set()):
        dev = imported in workspace.dev_dependencies.get(importer, set())
        where = "only a dev dependency of" if dev else "not a runtime dependency of"
        broken.append(f"{RULE_DECLARED}: {imported} is {where} {importer}")
    return broken


def check_source(
    source: str, path: str, module: str, is_package: bool, distribution: str, workspace: Workspace
) -> list[Violation]:
    try:
        found = list(imports(source, module, is_package))
    except SyntaxError as error:
        return [Violation(path, error.lineno or 0, module, "?", f"cannot parse: {error.msg}")]
    violations: list[Violation] = []
    for line, imported in found:
        if imported.startswith("."):
            violations.append(
                Violation(path, line, module, imported, "relative import beyond the dsh namespace")
            )
            continue
        target = distribution_of(imported)
        if target is None:
            continue
        if any((distribution, target) == (a, b) for a, b, _ in EXCEPTIONS):
            continue
        for rule in rules_broken(distribution, target, workspace):
            violations.append(Violation(path, line, module, imported, rule))
    return violations


def workspace_model(root: Path) -> tuple[Workspace, list[tuple[str, Path]]]:
    packages, _ = discover(root)
    model = Workspace(
        dependencies={p.name: p.runtime_dependencies() for p in packages},
        providers=set(providers(packages)),
        dev_dependencies={p.name: p.dev_dependencies() for p in packages},
    )
    return model, [(p.name, p.path) for p in packages]


def check_tree(
    root: Path = ROOT, model: tuple[Workspace, list[tuple[str, Path]]] | None = None
) -> tuple[list[Violation], int]:
    """The cross-distribution rules over every workspace package (``model``: the
    :func:`workspace_model` of ``root`` when the caller has it already)."""
    workspace, packages = model or workspace_model(root)
    violations: list[Violation] = []
    files = 0
    for distribution, folder in packages:
        src = folder / "src"
        for path in sorted(src.rglob("*.py")):
            parts = path.relative_to(src).with_suffix("").parts
            is_package = parts[-1] == "__init__"
            module = ".".join(parts[:-1] if is_package else parts)
            files += 1
            violations += check_source(
                path.read_text(),
                str(path.relative_to(root)),
                module,
                is_package,
                distribution,
                workspace,
            )
    return violations, files


# --- self-test ------------------------------------------------------------------------

SELF_TEST_WORKSPACE = Workspace(
    dependencies={
        "dsh-core": set(),
        "dsh-subagent": {"dsh-core"},
        "dsh-subagent-in-process-driver": {"dsh-core", "dsh-subagent"},
        "dsh-subagent-alpha": {"dsh-core", "dsh-subagent"},
        "dsh-subagent-beta": {"dsh-core", "dsh-subagent", "dsh-subagent-in-process-driver"},
        "dsh-tool-thing": {"dsh-core", "dsh-subagent"},
        "dsh-subprocess": {"dsh-core"},
        "dsh-testing": {"dsh-core", "dsh-subagent", "dsh-subagent-alpha"},  # alpha: an extra
    },
    providers={"dsh-subagent-alpha", "dsh-subagent-beta"},
    dev_dependencies={"dsh-subagent-alpha": {"dsh-tool-thing"}},
)

# (distribution, module, is_package, source, the rules it must break; empty: clean)
SELF_TEST_CASES: list[tuple[str, str, bool, str, set[str]]] = [
    (
        "dsh-subagent-alpha",
        "dsh.subagent_alpha.x",
        False,
        "import dsh.subagent_beta\n",
        {RULE_PROVIDER, RULE_DECLARED},
    ),
    (
        "dsh-subagent-alpha",
        "dsh.subagent_alpha.x",
        False,
        "from dsh import subagent_beta\n",
        {RULE_PROVIDER, RULE_DECLARED},
    ),
    (
        "dsh-subagent-alpha",
        "dsh.subagent_alpha.x",
        False,
        "def f():\n    from dsh.subagent_beta.run import Run\n    return Run\n",
        {RULE_PROVIDER, RULE_DECLARED},
    ),
    (
        "dsh-subagent-alpha",
        "dsh.subagent_alpha.x",
        False,
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from dsh.subagent_beta import B\n",
        {RULE_PROVIDER, RULE_DECLARED},
    ),
    (
        "dsh-subagent-alpha",
        "dsh.subagent_alpha.x",
        False,
        "import importlib\nimportlib.import_module('dsh.subagent_beta.driver')\n",
        {RULE_PROVIDER, RULE_DECLARED},
    ),
    (
        "dsh-subagent-alpha",
        "dsh.subagent_alpha.x",
        False,
        "import importlib as il\nil.import_module('dsh.subagent_beta')\n",
        {RULE_PROVIDER, RULE_DECLARED},
    ),
    (
        "dsh-subagent-alpha",
        "dsh.subagent_alpha.x",
        False,
        "from importlib import import_module as load\nload('dsh.subagent_beta')\n",
        {RULE_PROVIDER, RULE_DECLARED},
    ),
    (
        "dsh-subagent-alpha",
        "dsh.subagent_alpha.x",
        False,
        "import importlib\n_M = 'dsh.subagent_beta'\ndef f():\n    importlib.import_module(_M)\n",
        {RULE_PROVIDER, RULE_DECLARED},
    ),
    (
        "dsh-subagent-alpha",
        "dsh.subagent_alpha.x",
        False,
        "import anyio, importlib\n"
        "async def f():\n"
        "    await anyio.to_thread.run_sync(importlib.import_module, 'dsh.subagent_beta')\n",
        {RULE_PROVIDER, RULE_DECLARED},
    ),
    (
        "dsh-subagent-alpha",
        "dsh.subagent_alpha.x",
        False,
        "__import__('dsh.subagent_beta')\n",
        {RULE_PROVIDER, RULE_DECLARED},
    ),
    (
        "dsh-subagent-alpha",
        "dsh.subagent_alpha.pkg.mod",
        False,
        "from ... import subagent_beta\n",
        {RULE_PROVIDER, RULE_DECLARED},
    ),
    (
        "dsh-subagent-alpha",
        "dsh.subagent_alpha.x",
        False,
        "import importlib\nimportlib.import_module('..subagent_beta', 'dsh.subagent_alpha')\n",
        {RULE_PROVIDER, RULE_DECLARED},
    ),
    (
        "dsh-subagent",
        "dsh.subagent.runtime",
        False,
        "import dsh.subagent_alpha\n",
        {RULE_INTERFACE, RULE_DECLARED},
    ),
    (
        "dsh-subagent",
        "dsh.subagent",
        True,
        "from dsh.tool_thing import tool\n",
        {RULE_INTERFACE, RULE_DECLARED},
    ),
    (
        "dsh-subprocess",
        "dsh.subprocess.run",
        False,
        "from dsh.subagent_alpha import config\n",
        {RULE_INTERFACE, RULE_DECLARED},
    ),
    (
        "dsh-tool-thing",
        "dsh.tool_thing.tool",
        False,
        "from dsh.subagent_beta import x\n",
        {RULE_TOOL, RULE_DECLARED},
    ),
    (
        "dsh-core",
        "dsh.core.context",
        False,
        "from dsh.subagent import SubagentRuntime\n",
        {RULE_CORE, RULE_DECLARED},
    ),
    (
        "dsh-subagent-alpha",
        "dsh.subagent_alpha.x",
        False,
        "import dsh.tool_thing.tool\n",
        {RULE_DECLARED},
    ),
    (
        "dsh-subagent-alpha",
        "dsh.subagent_alpha.x",
        False,
        "import dsh.nonexistent\n",
        {RULE_DECLARED},
    ),
    (
        "dsh-subagent-alpha",
        "dsh.subagent_alpha",
        True,
        "from .... import x\n",
        {"relative import beyond the dsh namespace"},
    ),
    # clean: must report nothing
    (
        "dsh-subagent-beta",
        "dsh.subagent_beta.x",
        False,
        "from dsh.subagent_in_process_driver import drive\nimport dsh.subagent.errors\n"
        "from dsh.core import Context\nimport os, importlib\n"
        "importlib.import_module(os.environ['X'])\n",
        set(),
    ),
    (
        "dsh-subagent-alpha",
        "dsh.subagent_alpha",
        True,
        "from . import provider\nfrom .config import C\n"
        "from dsh.subagent_alpha.x import y\nimport dsh\n"
        "import importlib\nimportlib.import_module('.link', __package__)\n",
        set(),
    ),
    ("dsh-testing", "dsh.testing.mock", False, "from dsh.subagent_alpha import base\n", set()),
    ("dsh-core", "dsh.core.context", False, "import anyio\nfrom dsh.core.errors import E\n", set()),
]
