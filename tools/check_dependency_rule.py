"""Check dsh's dependency rule on the runtime dependencies recorded in uv.lock.

* The interface (dsh-subagent) and the consumer (dsh-tool-subagent) depend on no
  provider and no transport library.
* A provider depends on the interface plus its own transport, never on a sibling
  provider or another provider's transport: ``pip install dsh-subagent-acp`` must
  not pull in claude-agent-sdk.
* dsh-core depends on no other dsh package.

Dev dependency groups (what tests use) are not part of the rule.

    uv run python tools/check_dependency_rule.py
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

PROVIDERS = {
    "dsh-subagent-spawn-in-process": set(),
    "dsh-subagent-fork-in-process": set(),
    "dsh-subagent-acp": {"agent-client-protocol"},
    "dsh-subagent-codex": set(),
    "dsh-subagent-claude-code": {"claude-agent-sdk"},
}
TRANSPORTS = {"agent-client-protocol", "claude-agent-sdk"}


def closures(lock: dict) -> dict[str, set[str]]:
    """Runtime dependency closure of every locked package (extras included, dev excluded)."""
    direct: dict[str, set[str]] = {}
    for package in lock["package"]:
        deps = {d["name"] for d in package.get("dependencies", [])}
        for extra_deps in package.get("optional-dependencies", {}).values():
            deps |= {d["name"] for d in extra_deps}
        direct[package["name"]] = deps
    result: dict[str, set[str]] = {}
    for name in direct:
        seen: set[str] = set()
        stack = list(direct[name])
        while stack:
            dep = stack.pop()
            if dep not in seen:
                seen.add(dep)
                stack.extend(direct.get(dep, ()))
        result[name] = seen
    return result


def violations(closure: dict[str, set[str]]) -> list[str]:
    problems: list[str] = []
    for provider, own in PROVIDERS.items():
        deps = closure.get(provider)
        if deps is None:
            problems.append(f"{provider} is not in uv.lock")
            continue
        forbidden = (set(PROVIDERS) - {provider}) | (TRANSPORTS - own)
        for bad in sorted(deps & forbidden):
            problems.append(f"{provider} pulls in {bad}")
        if "dsh-subagent" not in deps:
            problems.append(f"{provider} does not depend on the interface dsh-subagent")
    for neutral in ("dsh-subagent", "dsh-tool-subagent", "dsh-subagent-in-process-driver"):
        for bad in sorted(closure.get(neutral, set()) & (set(PROVIDERS) | TRANSPORTS)):
            problems.append(f"{neutral} pulls in {bad}")
    for bad in sorted(d for d in closure.get("dsh-core", set()) if d.startswith("dsh-")):
        problems.append(f"dsh-core pulls in {bad}")
    return problems


def main() -> int:
    lock = tomllib.loads((Path(__file__).resolve().parents[1] / "uv.lock").read_text())
    problems = violations(closures(lock))
    for problem in problems:
        print(f"dependency rule: {problem}", file=sys.stderr)
    if problems:
        return 1
    print(f"dependency rule holds for {len(PROVIDERS)} providers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
