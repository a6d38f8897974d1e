"""Presets: TOML files that say which plugins to load, with what config.

::

    [agent]
    persona = "You are a careful engineer."
    sessions_dir = "sessions"          # relative to the preset file
    [agent.model]
    adapter = "scripted"

    [[plugin]]
    name = "dsh-subagent-spawn-in-process"

    [[plugin]]
    id = "tool-subagent"
    name = "dsh-tool-subagent"
    config = { provider = "spawn", tool_name = "subagent" }

The same plugin may appear in several rows; ``id`` tells them apart (default:
the plugin name, then ``name#2``, ``name#3``...). ``disabled = true`` keeps a row
in the file without loading it.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dsh.core._errors import DshError
from dsh.core._llm import ModelConfig
from dsh.core._validation import validation_problems

__all__ = [
    "DEFAULT_PERSONA",
    "AgentDefaults",
    "PluginRow",
    "Preset",
    "PresetError",
    "load_preset",
    "parse_preset",
]

DEFAULT_PERSONA = "You are a helpful, precise assistant."


class PresetError(DshError):
    """A preset (or one of its rows) is invalid; the message names the row."""


class PluginRow(BaseModel):
    """One ``[[plugin]]`` row."""

    model_config = ConfigDict(extra="forbid")

    id: str = ""
    name: str
    config: dict[str, Any] = {}
    disabled: bool = False

    def describe(self, index: int | None = None) -> str:
        """How error messages name this row."""
        where = f"preset row {index + 1}" if index is not None else "plugin row"
        return f'{where} (id "{self.id}", plugin "{self.name}")'


class AgentDefaults(BaseModel):
    """The ``[agent]`` table: defaults for every agent of the context."""

    model_config = ConfigDict(extra="forbid")

    model: ModelConfig | None = None
    persona: str = DEFAULT_PERSONA
    max_steps: int = Field(50, ge=1)
    sessions_dir: str | None = None
    cwd: str | None = None


class Preset(BaseModel):
    """A parsed preset."""

    model_config = ConfigDict(extra="forbid")

    agent: AgentDefaults = AgentDefaults()
    plugin: list[PluginRow] = []
    source: str = "<memory>"

    def enabled_rows(self) -> list[tuple[int, PluginRow]]:
        """(index, row) of every row not disabled."""
        return [(i, row) for i, row in enumerate(self.plugin) if not row.disabled]


def parse_preset(text: str, *, source: str = "<string>", base_dir: Path | None = None) -> Preset:
    """Parse preset TOML text. Errors name the source and the row."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PresetError(f"{source}: not valid TOML: {exc}") from None
    return _from_mapping(raw, source, base_dir)


def load_preset(path: str | Path) -> Preset:
    """Load a preset file; a relative ``sessions_dir`` is resolved against its folder."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise PresetError(f"cannot read preset {file}: {exc.strerror or exc}") from None
    return parse_preset(text, source=str(file), base_dir=file.resolve().parent)


def _from_mapping(raw: dict[str, Any], source: str, base_dir: Path | None) -> Preset:
    unknown = sorted(set(raw) - {"agent", "plugin"})
    if unknown:
        raise PresetError(
            f"{source}: unknown top-level keys {', '.join(unknown)} (expected [agent], [[plugin]])"
        )
    rows_raw = raw.get("plugin", [])
    if not isinstance(rows_raw, list):
        raise PresetError(f"{source}: 'plugin' must be an array of tables ([[plugin]])")
    rows: list[PluginRow] = []
    seen: dict[str, int] = {}
    counts: dict[str, int] = {}
    for index, row_raw in enumerate(rows_raw):
        label = f"{source}: preset row {index + 1}"
        if isinstance(row_raw, dict) and "name" in row_raw:
            label += f' (plugin "{row_raw["name"]}")'
        try:
            row = PluginRow.model_validate(row_raw)
        except ValidationError as exc:
            raise PresetError(f"{label}: {validation_problems(exc)}") from None
        if not row.id:
            counts[row.name] = counts.get(row.name, 0) + 1
            row.id = row.name if counts[row.name] == 1 else f"{row.name}#{counts[row.name]}"
        if row.id in seen:
            first = seen[row.id] + 1
            raise PresetError(
                f"{source}: {row.describe(index)}: duplicate id (also used by row {first})"
            )
        seen[row.id] = index
        rows.append(row)
    try:
        agent = AgentDefaults.model_validate(raw.get("agent", {}))
    except ValidationError as exc:
        raise PresetError(f"{source}: [agent]: {validation_problems(exc)}") from None
    if agent.sessions_dir is not None and base_dir is not None:
        agent.sessions_dir = str((base_dir / agent.sessions_dir).resolve())
    return Preset(agent=agent, plugin=rows, source=source)
