"""tools/demo.sh installs dsh-cli's runtime closure alone (``uv sync --no-dev --package
dsh-cli``): read from uv.lock, it holds no product CLI, no test kit, and downloads well
under 60 MB."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 60 * 1024 * 1024


def closure(lock: dict[str, Any], root: str) -> dict[str, dict[str, Any]]:
    packages = {p["name"]: p for p in lock["package"]}
    found: dict[str, dict[str, Any]] = {}
    todo = [root]
    while todo:
        name = todo.pop()
        if name in found:
            continue
        found[name] = packages[name]
        todo.extend(dep["name"] for dep in packages[name].get("dependencies", []))
    return found


def download_size(package: dict[str, Any]) -> int:
    wheels = package.get("wheels", [])
    linux = [
        w
        for w in wheels
        if "none-any" in w["url"] or ("x86_64" in w["url"] and "manylinux" in w["url"])
    ]
    candidates = linux or wheels
    if candidates:
        return max(int(w.get("size", 0)) for w in candidates)
    return int(package.get("sdist", {}).get("size", 0))


def test_demo_environment_is_small_and_has_no_product_cli() -> None:
    lock = tomllib.loads((ROOT / "uv.lock").read_text(encoding="utf-8"))
    runtime = closure(lock, "dsh-cli")
    assert "claude-agent-sdk" not in runtime
    assert "dsh-subagent-claude-code" not in runtime
    assert "dsh-testing" not in runtime
    assert "pytest" not in runtime
    assert "rich" in runtime
    total = sum(download_size(p) for p in runtime.values())
    assert total < LIMIT, f"{total / 1e6:.1f} MB"
    script = (ROOT / "tools" / "demo.sh").read_text(encoding="utf-8")
    assert "--no-dev --package dsh-cli" in script
    assert "UV_PROJECT_ENVIRONMENT" in script
