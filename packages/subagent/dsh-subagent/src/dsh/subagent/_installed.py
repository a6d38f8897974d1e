"""The providers installed in this environment: the ``dsh.providers`` entry points.

A provider's distribution declares its short provider name next to its plugin::

    [project.entry-points."dsh.plugins"]
    dsh-subagent-codex = "dsh.subagent_codex:plugin"

    [project.entry-points."dsh.providers"]
    codex = "dsh.subagent_codex:plugin"

so the ``subagent`` tool, ``dsh presets providers`` and error messages can name the
installed providers, and the plugin row that loads each, without importing any.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points

__all__ = [
    "PROVIDERS_GROUP",
    "InstalledProvider",
    "installed_providers",
    "unregistered_provider_fix",
]

PROVIDERS_GROUP = "dsh.providers"
"""The entry-point group: short provider name -> the provider's plugin object."""

_PLUGINS_GROUP = "dsh.plugins"


@dataclass(frozen=True)
class InstalledProvider:
    """One ``dsh.providers`` entry point, read from installed metadata (not loaded)."""

    name: str
    """The short provider name (``codex``): the name its plugin registers by default."""
    plugin: str | None
    """The ``dsh.plugins`` name of its plugin (the preset row's ``name``), if found."""
    distribution: str | None
    """The distribution that declares it (``dsh-subagent-codex``)."""
    value: str
    """Where the plugin object is (``dsh.subagent_codex:plugin``)."""

    def describe(self) -> str:
        """``"codex" (plugin "dsh-subagent-codex")``: the provider and its row's name."""
        row = self.plugin or self.distribution
        return f'"{self.name}" (plugin "{row}")' if row else f'"{self.name}"'


def installed_providers() -> list[InstalledProvider]:
    """The installed providers, sorted by name, from the ``dsh.providers`` entry points
    (nothing is imported). The plugin of each is the ``dsh.plugins`` entry of the same
    distribution that points at the same object (else its only one)."""
    plugins: dict[str | None, list[EntryPoint]] = {}
    for entry in entry_points(group=_PLUGINS_GROUP):
        plugins.setdefault(_distribution(entry), []).append(entry)
    found: dict[str, InstalledProvider] = {}
    for entry in entry_points(group=PROVIDERS_GROUP):
        distribution = _distribution(entry)
        own = plugins.get(distribution, []) if distribution is not None else []
        same = [p.name for p in own if p.value == entry.value]
        plugin = same[0] if same else own[0].name if len(own) == 1 else None
        found.setdefault(
            entry.name, InstalledProvider(entry.name, plugin, distribution, entry.value)
        )
    return sorted(found.values(), key=lambda provider: provider.name)


def unregistered_provider_fix(name: str, registered: Iterable[str] = ()) -> str:
    """The fix for a provider ``name`` that is not registered, for an error message: the
    plugin row to add when ``name`` is installed, else the installed providers that are
    not registered (by ``registered``, the names that are)."""
    installed = installed_providers()
    for provider in installed:
        if provider.name == name and provider.plugin is not None:
            row = provider.plugin
            return f'provider "{name}" is installed: add a [[plugin]] row with name = "{row}"'
    loaded = set(registered)
    others = ", ".join(p.describe() for p in installed if p.name not in loaded)
    names = ", ".join(f'"{n}"' for n in sorted(loaded)) or "none"
    load = f"; installed, not loaded (add its [[plugin]] row): {others}" if others else ""
    return f"use a registered provider ({names}){load}"


def _distribution(entry: EntryPoint) -> str | None:
    dist = entry.dist
    return None if dist is None else str(dist.name)
