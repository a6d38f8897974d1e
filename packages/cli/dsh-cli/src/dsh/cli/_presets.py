"""Finding presets: ``--preset FILE|NAME``, ``./dsh.toml``, or a named preset (the ones
shipped with dsh, and any other package's, through the ``dsh.presets`` entry points);
``dsh presets`` / ``dsh presets show NAME`` / ``dsh presets providers`` (the installed
subagent providers, through the ``dsh.providers`` entry points, and their plugin rows)."""

from __future__ import annotations

import argparse
import sys
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from dsh.core import Preset, PresetError, find_preset, load_named_preset
from dsh.core.plugins import named_presets

__all__ = [
    "DEMO",
    "STANDARD",
    "preset_text",
    "presets_command",
    "providers_table",
    "resolve_preset",
    "shipped_preset",
    "shipped_presets",
]

_FOLDER = resources.files("dsh.cli") / "presets"
STANDARD: Traversable = _FOLDER / "standard.toml"
"""The standard preset (entry point ``standard`` in ``dsh.presets``)."""
DEMO: Traversable = _FOLDER / "demo.toml"
"""The offline demo's preset (entry point ``demo`` in ``dsh.presets``)."""


def shipped_presets() -> list[str]:
    """Names of the presets shipped in ``dsh/cli/presets/``, and of any other installed
    named preset."""
    own = {p.name.removesuffix(".toml") for p in _FOLDER.iterdir() if p.name.endswith(".toml")}
    return sorted(own | set(named_presets()))


def preset_text(name: str) -> tuple[str, str]:
    """The TOML text of the named preset ``name`` and where it is from."""
    resource = _FOLDER / f"{name}.toml"
    if resource.is_file():
        return resource.read_text(encoding="utf-8"), f"<shipped preset {name}>"
    if name in named_presets():
        # Another package's preset: load it to find it, show its source text.
        from importlib.metadata import entry_points

        entry = next(ep for ep in entry_points(group="dsh.presets") if ep.name == name)
        target = entry.load()
        if isinstance(target, str | Path):
            return Path(target).read_text(encoding="utf-8"), str(target)
        return str(target.read_text(encoding="utf-8")), entry.value
    raise PresetError(f'no preset named "{name}" (available: {", ".join(shipped_presets())})')


def shipped_preset(name: str) -> Preset:
    """Load the named preset ``name`` (``standard``, ``demo``, ...)."""
    resource = _FOLDER / f"{name}.toml"
    if resource.is_file():
        from dsh.core import parse_preset

        return parse_preset(resource.read_text(encoding="utf-8"), source=f"<shipped preset {name}>")
    return load_named_preset(name)


def resolve_preset(value: str | None, cwd: Path | None = None, *, trust: bool = False) -> Preset:
    """``--preset`` as given: an existing file, else a named preset; without one,
    ``dsh.toml`` in ``cwd`` (default: the current directory) if present, else the
    standard preset. Raises :class:`PresetError` saying what was looked for, and
    :class:`~dsh.core.plugins.UntrustedPresetError` for a ``dsh.toml`` found in ``cwd`` that is
    not trusted (unless ``trust``: ``--trust``)."""
    return find_preset(value, cwd=cwd, trust=trust) or shipped_preset("standard")


def providers_table() -> str:
    """The installed subagent providers (``dsh.providers`` entry points, none imported),
    one a line: the provider's name and the ``[[plugin]]`` row name that registers it."""
    from dsh.subagent import installed_providers

    installed = installed_providers()
    if not installed:
        return "no subagent provider is installed\n"
    width = max(len(provider.name) for provider in installed)
    lines = [f"{'provider':<{width}}  plugin"]
    for provider in installed:
        row = provider.plugin or f"? (distribution {provider.distribution})"
        lines.append(f"{provider.name:<{width}}  {row}")
    return "\n".join(lines) + "\n"


def presets_command(args: argparse.Namespace) -> int:
    """``dsh presets [list]`` lists the named presets; ``dsh presets show NAME`` prints one;
    ``dsh presets providers`` lists the installed subagent providers."""
    action = getattr(args, "presets_action", None)
    if action == "providers":
        sys.stdout.write(providers_table())
        return 0
    if action == "show":
        try:
            text, _ = preset_text(args.name)
        except PresetError as exc:
            print(f"dsh presets: {exc}", file=sys.stderr)
            return 2
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return 0
    for name in shipped_presets():
        print(name)
    return 0
