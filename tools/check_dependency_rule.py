"""Check dsh's dependency rule on the runtime dependencies recorded in uv.lock.

* The interface (dsh-subagent), the provider kit (KIT), the non-provider helpers
  (NOT_PROVIDERS) and every tool package (dsh-tool-*) depend on no provider and no
  transport library.
* A provider depends on the interface plus its own transport, never on a sibling
  provider or another provider's transport: ``pip install dsh-subagent-acp`` must
  not pull in claude-agent-sdk.
* dsh-core depends on no other dsh package.

The providers and their transports are derived from the packages folder: a provider
is a distribution named dsh-subagent-* that is not in NOT_PROVIDERS, and its
transport libraries are the third-party libraries among its declared runtime
dependencies, followed through the dsh packages it declares, that are not in
SHARED_LIBRARIES and not brought by the interface.

Dev dependency groups (what tests use) are not part of the rule.

    uv run python tools/check_dependency_rule.py
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path
from typing import Any

from check_workspace import Package, discover, normalize, parse_requirement

INTERFACE = "dsh-subagent"
PROVIDER_PREFIX = "dsh-subagent-"
# dsh-subagent-* distributions that are not providers (they register no provider).
NOT_PROVIDERS = {
    # The in-process child driver: a library shared by the spawn and fork providers.
    "dsh-subagent-in-process-driver",
}
# The provider kit (DESIGN.md section 10): shared building blocks for providers that,
# like the interface, must not depend on or import any provider. Checked when present.
# dsh-jsonrpc is the JSON-RPC peer the acp and codex providers (and dsh-acp) speak through.
KIT = {"dsh-subprocess", "dsh-jsonrpc"}
# Libraries any package may use: general-purpose, not one provider's transport.
SHARED_LIBRARIES = {
    "anyio",
    "pydantic",
    "jsonschema",
    "httpx",
    "typing-extensions",
}


def providers(packages: list[Package]) -> dict[str, set[str]]:
    """Every provider distribution and its own transport libraries.

    A provider's transports are the third-party libraries it declares, directly or
    through the dsh packages it declares (a provider that declared dsh-acp would get
    agent-client-protocol through it), less SHARED_LIBRARIES and whatever the interface
    itself brings.
    """
    by_name = {package.name: package for package in packages}

    def third_party(name: str) -> set[str]:
        found: set[str] = set()
        seen: set[str] = set()
        stack = [name]
        while stack:
            current = stack.pop()
            if current in seen or current not in by_name:
                continue
            seen.add(current)
            for dep in by_name[current].runtime_dependencies():
                if dep.startswith("dsh-"):
                    stack.append(dep)
                else:
                    found.add(dep)
        return found

    common = SHARED_LIBRARIES | third_party(INTERFACE)
    return {
        package.name: third_party(package.name) - common
        for package in packages
        if package.name.startswith(PROVIDER_PREFIX) and package.name not in NOT_PROVIDERS
    }


def neutral_packages(packages: list[Package]) -> list[str]:
    """The packages that must pull in no provider and no transport."""
    names = {p.name for p in packages}
    neutral = {INTERFACE, *NOT_PROVIDERS} | (KIT & names)
    neutral |= {n for n in names if n.startswith("dsh-tool-")}
    return sorted(neutral)


def closures(lock: dict[str, Any]) -> dict[str, set[str]]:
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


def violations(
    closure: dict[str, set[str]], provider_transports: dict[str, set[str]], neutral: list[str]
) -> list[str]:
    problems: list[str] = []
    transports = set().union(*provider_transports.values()) if provider_transports else set()
    for provider, own in sorted(provider_transports.items()):
        deps = closure.get(provider)
        if deps is None:
            problems.append(f"{provider} is not in uv.lock")
            continue
        forbidden = (set(provider_transports) - {provider}) | (transports - own)
        for bad in sorted(deps & forbidden):
            problems.append(f"{provider} pulls in {bad}")
        if INTERFACE not in deps:
            problems.append(f"{provider} does not depend on the interface {INTERFACE}")
    for name in neutral:
        if name not in closure:
            problems.append(f"{name} is not in uv.lock")
            continue
        for bad in sorted(closure[name] & (set(provider_transports) | transports)):
            problems.append(f"{name} pulls in {bad}")
    for bad in sorted(d for d in closure.get("dsh-core", set()) if d.startswith("dsh-")):
        problems.append(f"dsh-core pulls in {bad}")
    return problems


def main() -> int:
    root = Path(__file__).resolve().parents[1]
    packages, problems = discover(root)
    lock = tomllib.loads((root / "uv.lock").read_text())
    locked = {normalize(p["name"]) for p in lock["package"]}
    for package in packages:
        for requirement, _ in package.runtime_requirements():
            name = parse_requirement(requirement)[0]
            if name not in locked:
                problems.append(f"{package.name} declares {name}, which is not in uv.lock")
    found = providers(packages)
    if not found:
        problems.append(f"no provider found under packages/*/* (named {PROVIDER_PREFIX}*)")
    problems += violations(closures(lock), found, neutral_packages(packages))
    for problem in problems:
        print(f"dependency rule: {problem}", file=sys.stderr)
    if problems:
        return 1
    print(f"dependency rule holds for {len(found)} providers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
