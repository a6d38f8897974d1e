"""Check dsh's import rules over every package's source (CI runs this).

Between distributions (tools/import_rules.py): no provider imports another provider,
the interface and the kit import no provider or tool, tools import no provider,
dsh.core imports no other dsh package, every dsh import is a declared dependency.

Inside each distribution (tools/module_rules.py): no import cycle between its modules
(TYPE_CHECKING and function-local imports count), and no private name of another module
touched (``obj._name`` outside its own module, ``from m import _name``).

Each violation is printed as ``path:line: ... (<rule>)``; the exit status is 1 when
there is any.

    uv run --frozen python tools/check_imports.py [--self-test]
"""

from __future__ import annotations

import sys

import import_rules
import module_rules
from check_workspace import ROOT


def self_test() -> int:
    """Run both rule sets' self-test cases; 0 when they all pass."""
    failures: list[str] = []
    for distribution, module, is_package, source, expected in import_rules.SELF_TEST_CASES:
        found = import_rules.check_source(
            source,
            "<self-test>",
            module,
            is_package,
            distribution,
            import_rules.SELF_TEST_WORKSPACE,
        )
        rules = {v.rule.split(":", 1)[0] for v in found}
        if rules != expected:
            failures.append(
                f"{distribution} {module}: {source!r}\n    expected {sorted(expected) or 'nothing'}"
                f", got {[str(v) for v in found] or 'nothing'}"
            )
    failures += module_rules.self_test()
    # The real tree's model must find the providers, or every provider rule is vacuous.
    workspace, packages = import_rules.workspace_model(ROOT)
    if len(workspace.providers) < 2 or not packages:
        failures.append(f"the workspace model finds providers {sorted(workspace.providers)}")
    for failure in failures:
        print(f"import rules self-test: FAILED {failure}", file=sys.stderr)
    if failures:
        return 1
    cases = len(import_rules.SELF_TEST_CASES) + len(module_rules.SELF_TEST_CASES)
    print(f"import rules self-test: {cases} cases pass")
    return 0


def main(argv: list[str]) -> int:
    """Check the tree (or, with --self-test, the checker)."""
    if argv == ["--self-test"]:
        return self_test()
    if argv:
        print("usage: check_imports.py [--self-test]", file=sys.stderr)
        return 2
    model = import_rules.workspace_model(ROOT)
    violations, files = import_rules.check_tree(ROOT, model)
    found: list[object] = list(violations)
    _, packages = model
    for _distribution, folder in packages:
        found.extend(module_rules.check_package(folder / "src", ROOT))
    found.sort(key=lambda v: (getattr(v, "path", ""), getattr(v, "line", 0)))
    for violation in found:
        print(violation, file=sys.stderr)
    if found:
        print(f"import rules: {len(found)} violation(s)", file=sys.stderr)
        return 1
    print(f"import rules hold in {files} files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
