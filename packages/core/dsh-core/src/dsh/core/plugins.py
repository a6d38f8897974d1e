"""Plugins and presets beyond the front door: loaded plugins, preset rows and agent
defaults, named presets, workspace trust, and plugin config errors in preset words.

:mod:`dsh.core` itself exports what most code needs first: ``Plugin``,
``PluginHost``, ``Preset``, ``PresetError``, ``parse_preset``, ``load_preset``,
``load_named_preset`` and ``find_preset`` (the preset a command runs). A ``dsh.toml``
that ``find_preset`` finds in the working directory is used only once trusted
(:func:`trust_preset`, recorded per content); :func:`check_trust` raises
:class:`UntrustedPresetError` otherwise. :func:`validation_problems` words a plugin
config's pydantic errors the way preset errors are worded.
"""

from dsh.core._plugins import LoadedPlugin, NoConfig, PluginError
from dsh.core._presets import AgentDefaults, PluginRow, named_presets
from dsh.core._trust import (
    TrustedPreset,
    UntrustedPresetError,
    check_trust,
    preset_reach,
    revoke_trust,
    trust_preset,
    trust_store_path,
    trusted_presets,
)
from dsh.core._validation import validation_problems

__all__ = [
    "AgentDefaults",
    "LoadedPlugin",
    "NoConfig",
    "PluginError",
    "PluginRow",
    "TrustedPreset",
    "UntrustedPresetError",
    "check_trust",
    "named_presets",
    "preset_reach",
    "revoke_trust",
    "trust_preset",
    "trust_store_path",
    "trusted_presets",
    "validation_problems",
]
