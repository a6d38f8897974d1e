"""The package's modules depend one way, and the interface does not reach the engine.

Read from the source (every import counts: ``TYPE_CHECKING`` blocks and imports
inside functions too), so a cycle kept alive through a type-only import still fails.
"""

from __future__ import annotations

import ast
from pathlib import Path

import dsh.subagent

PACKAGE = Path(dsh.subagent.__file__).parent

INTERFACE = {
    "_errors",
    "_types",
    "_progress",
    "_diagnostics",
    "_validation",
    "_stream",
    "_run",
    "_provider",
}
"""The vocabulary a provider or a caller needs: requests, results, errors, the run."""
ENGINE = {
    "_runtime",
    "_admission",
    "_tree",
    "_budget",
    "_ledger",
    "_continuable",
    "_continuable_store",
    "_continuable_turns",
    "_plugin",
}
"""What runs the runs: the registry, admission, the run tree, continuable children."""


def _imports() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.glob("*.py"):
        name = path.stem
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                modules = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            else:
                continue
            for module in modules:
                if module.startswith("dsh.subagent."):
                    target = module.removeprefix("dsh.subagent.").split(".")[0]
                    if target != name and (PACKAGE / f"{target}.py").exists():
                        found.add(target)
        graph[name] = found
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state:
                found = visit(target)
                if found is not None:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found is not None:
                return found
    return None


def test_the_modules_import_each_other_one_way() -> None:
    graph = _imports()
    graph.pop("__init__", None)  # the front door imports everything, nothing imports it
    assert _cycle(graph) is None, f"import cycle: {' -> '.join(_cycle(graph) or ())}"


def test_the_interface_does_not_import_the_engine() -> None:
    graph = _imports()
    assert set(graph) >= INTERFACE
    assert set(graph) >= ENGINE - {"_plugin"}
    for module in sorted(INTERFACE):
        reached = _reachable(graph, module)
        assert not reached & ENGINE, f"{module} reaches the engine: {sorted(reached & ENGINE)}"


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    stack = [start]
    while stack:
        for target in graph.get(stack.pop(), ()):
            if target not in seen:
                seen.add(target)
                stack.append(target)
    return seen


def test_no_module_is_over_500_lines() -> None:
    long = {
        path.name: n
        for path in PACKAGE.glob("*.py")
        if (n := len(path.read_text().splitlines())) > 500 and path.name != "_remote.py"
    }
    assert not long, f"split these modules: {long}"
