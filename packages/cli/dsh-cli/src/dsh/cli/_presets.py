"""Finding presets: ``--preset FILE``, ``./dsh.toml``, or a preset shipped with dsh."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from dsh.core import Preset, load_preset, parse_preset

__all__ = ["list_presets_command", "resolve_preset", "shipped_preset", "shipped_presets"]


def shipped_presets() -> list[str]:
    """Names of the presets in ``dsh/cli/presets/``."""
    folder = resources.files("dsh.cli") / "presets"
    return sorted(
        p.name.removesuffix(".toml") for p in folder.iterdir() if p.name.endswith(".toml")
    )


def shipped_preset(name: str) -> Preset:
    """Load the shipped preset called ``name`` (``standard``, ``demo``, ...)."""
    resource = resources.files("dsh.cli") / "presets" / f"{name}.toml"
    if not resource.is_file():
        raise FileNotFoundError(
            f"no shipped preset {name!r} (available: {', '.join(shipped_presets())})"
        )
    return parse_preset(resource.read_text(encoding="utf-8"), source=f"<shipped preset {name}>")


def resolve_preset(path: str | None) -> Preset:
    """``path`` if given, else ``./dsh.toml`` if present, else the standard preset."""
    if path is not None:
        return load_preset(path)
    local = Path("dsh.toml")
    if local.is_file():
        return load_preset(local)
    return shipped_preset("standard")


def list_presets_command() -> int:
    """``dsh presets``."""
    for name in shipped_presets():
        print(name)
    return 0
