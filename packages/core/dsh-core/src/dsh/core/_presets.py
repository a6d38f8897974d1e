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

A preset may build on another with ``extends`` (a preset name, or a file path
relative to the extending preset's folder)::

    extends = "standard"               # a named preset (see named_presets())
    [agent.model]
    adapter = "openai"
    model = "deepseek-chat"

Merge rules, base first, then the extending preset on top:

* ``[agent]``: each key given overrides the base's key (a table such as
  ``[agent.model]`` replaces the base's table whole);
* ``[[plugin]]``: rows are appended after the base's rows, except a row whose
  ``id`` (given, or the default one) matches a base row: its keys replace that
  row's keys in place (``{ id = "tool-subagent-fork", disabled = true }`` switches
  a base row off; a ``config`` given replaces the base row's config whole);
* ``[permissions]``: ``default`` overrides when given, ``tools`` merge per tool.

Relative paths (``sessions_dir``, a base file) resolve against the folder of the
file that says them. Named presets come from the ``dsh.presets`` entry-point group:
each entry point is named after its preset and loads a path or a
``importlib.resources`` file of TOML (dsh-cli ships ``standard`` and ``demo``).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dsh.core._errors import DshError
from dsh.core._llm import ModelConfig
from dsh.core._permissions import PermissionsConfig
from dsh.core._validation import validation_problems

__all__ = [
    "DEFAULT_PERSONA",
    "AgentDefaults",
    "PluginRow",
    "Preset",
    "PresetError",
    "load_named_preset",
    "load_preset",
    "named_presets",
    "parse_preset",
]

PRESETS_ENTRY_POINT_GROUP = "dsh.presets"
"""Entry-point group of named presets (``extends = "NAME"``)."""
MAX_EXTENDS_DEPTH = 16

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
    permissions: PermissionsConfig = PermissionsConfig()
    source: str = "<memory>"

    def enabled_rows(self) -> list[tuple[int, PluginRow]]:
        """(index, row) of every row not disabled."""
        return [(i, row) for i, row in enumerate(self.plugin) if not row.disabled]


def parse_preset(text: str, *, source: str = "<string>", base_dir: Path | None = None) -> Preset:
    """Parse preset TOML text (following ``extends``). Errors name the source and the row.

    ``base_dir`` is the folder relative paths resolve against (default: the current
    directory for ``extends``; ``sessions_dir`` stays as written)."""
    raw = _layered(_toml(text, source), source, base_dir, ())
    return _from_mapping(raw, source, base_dir)


def load_preset(path: str | Path) -> Preset:
    """Load a preset file; a relative ``sessions_dir`` or ``extends`` path is resolved
    against its folder."""
    file = Path(path)
    return parse_preset(_read(file), source=str(file), base_dir=file.resolve().parent)


def named_presets() -> dict[str, str]:
    """Installed named presets (the ``dsh.presets`` entry points): name → where from."""
    return {ep.name: ep.value for ep in entry_points(group=PRESETS_ENTRY_POINT_GROUP)}


def load_named_preset(name: str) -> Preset:
    """The installed preset called ``name``; :class:`PresetError` listing the installed
    ones if there is none."""
    text, source, base_dir = _named_text(name)
    return parse_preset(text, source=source, base_dir=base_dir)


def find_preset(value: str | None = None, *, cwd: Path | None = None) -> Preset | None:
    """The preset a command runs (``--preset``, as ``dsh run``, ``dsh acp``, ``dsh a2a``
    and ``dsh worker`` read it): ``value`` as an existing file, else as a named preset;
    without ``value``, ``dsh.toml`` in ``cwd`` (default: the current directory), else the
    installed ``standard`` preset, else ``None``. :class:`PresetError` says what was
    looked for when ``value`` names nothing."""
    if value is not None:
        file = Path(value).expanduser()
        if file.is_file():
            return load_preset(file)
        if not value.endswith(".toml") and "/" not in value and "\\" not in value:
            names = named_presets()
            if value in names:
                return load_named_preset(value)
            raise PresetError(
                f'no preset file "{value}" and no preset named "{value}"'
                f" (named presets: {', '.join(sorted(names)) or 'none installed'})"
            )
        if file.exists():
            raise PresetError(f"preset {value} is not a file")
        raise PresetError(f"no preset file {value}")
    local = (cwd or Path.cwd()) / "dsh.toml"
    if local.is_file():
        return load_preset(local)
    if "standard" in named_presets():
        return load_named_preset("standard")
    return None


# -- extends -----------------------------------------------------------------------------


def _toml(text: str, source: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PresetError(f"{source}: not valid TOML: {exc}") from None


def _read(file: Path) -> str:
    try:
        return file.read_text(encoding="utf-8")
    except OSError as exc:
        raise PresetError(f"cannot read preset {file}: {exc.strerror or exc}") from None


def _named_text(name: str) -> tuple[str, str, Path | None]:
    found = [ep for ep in entry_points(group=PRESETS_ENTRY_POINT_GROUP) if ep.name == name]
    if not found:
        installed = ", ".join(sorted(named_presets())) or "none"
        raise PresetError(f'no preset named "{name}" (installed: {installed})')
    entry = found[0]
    try:
        target = entry.load()
        if isinstance(target, str | Path):
            file = Path(target)
            return _read(file), str(file), file.resolve().parent
        text = target.read_text(encoding="utf-8")
    except PresetError:
        raise
    except Exception as exc:
        raise PresetError(
            f'preset "{name}" ({entry.value}) could not be read: {type(exc).__name__}: {exc}'
        ) from exc
    if not isinstance(text, str):
        raise PresetError(f'preset "{name}" ({entry.value}) is not TOML text')
    return text, f"<preset {name}>", None


def _layered(
    raw: dict[str, Any], source: str, base_dir: Path | None, chain: tuple[str, ...]
) -> dict[str, Any]:
    """``raw`` with its ``extends`` chain merged in (base first), every row with an
    explicit id and relative paths resolved per layer; validated layer by layer so an
    error names the file it is in."""
    chain = (*chain, source)
    extends = raw.pop("extends", None)
    if extends is None:
        _from_mapping(raw, source, base_dir)  # a base on its own: errors name its file
    own = _explicit_ids(raw, source)
    _expand_preset_dir(own, source, base_dir)
    if base_dir is not None:
        agent = own.get("agent")
        if isinstance(agent, dict) and isinstance(agent.get("sessions_dir"), str):
            agent["sessions_dir"] = str((base_dir / agent["sessions_dir"]).resolve())
    if extends is None:
        return own
    if not isinstance(extends, str) or not extends.strip():
        raise PresetError(f"{source}: extends must be a preset name or a file path")
    if len(chain) > MAX_EXTENDS_DEPTH:
        raise PresetError(f"{source}: extends is nested too deeply: {' -> '.join(chain)}")
    if extends.endswith(".toml") or "/" in extends or "\\" in extends:
        file = Path(extends).expanduser()
        if not file.is_absolute():
            file = (base_dir or Path.cwd()) / file
        base_source = str(file)
        if str(file.resolve()) in {_resolved(c) for c in chain}:
            raise PresetError(f"{source}: extends cycle: {' -> '.join((*chain, base_source))}")
        base_raw = _toml(_read(file), base_source)
        base_base_dir: Path | None = file.resolve().parent
    else:
        text, base_source, base_base_dir = _named_text(extends)
        if base_source in chain:
            raise PresetError(f"{source}: extends cycle: {' -> '.join((*chain, base_source))}")
        base_raw = _toml(text, base_source)
    try:
        base = _layered(base_raw, base_source, base_base_dir, chain)
    except PresetError as exc:
        raise PresetError(f"{source}: in the preset it extends: {exc}") from None
    merged = _merge(base, own)
    _from_mapping(dict(merged), source, base_dir)  # what this layer added: errors name it
    return merged


PRESET_DIR = "{preset_dir}"
"""In a row's config strings: the absolute folder of the preset file that has the row
(``args = ["acp", "--preset", "{preset_dir}/child.toml"]``), so a path next to the
preset works from any current directory."""


def _expand_preset_dir(raw: dict[str, Any], source: str, base_dir: Path | None) -> None:
    rows = raw.get("plugin")
    if not isinstance(rows, list):
        return
    folder = str(base_dir.resolve()) if base_dir is not None else None

    def expand(value: Any, where: str) -> Any:
        if isinstance(value, str) and PRESET_DIR in value:
            if folder is None:
                raise PresetError(
                    f"{source}: {where}: {PRESET_DIR} is only known for a preset read from"
                    " a file; use an absolute path here"
                )
            return value.replace(PRESET_DIR, folder)
        if isinstance(value, list):
            return [expand(item, where) for item in value]
        if isinstance(value, dict):
            return {key: expand(item, where) for key, item in value.items()}
        return value

    for index, row in enumerate(rows):
        if isinstance(row, dict) and isinstance(row.get("config"), dict):
            row["config"] = expand(row["config"], f'preset row {index + 1} (id "{row.get("id")}")')


def _resolved(source: str) -> str:
    try:
        return str(Path(source).resolve())
    except (OSError, ValueError):
        return source


def _explicit_ids(raw: dict[str, Any], source: str) -> dict[str, Any]:
    """A copy of ``raw`` whose rows all carry their (default) ids."""
    out = dict(raw)
    rows = raw.get("plugin")
    if not isinstance(rows, list):
        if rows is not None:
            raise PresetError(f"{source}: 'plugin' must be an array of tables ([[plugin]])")
        return out
    counts: dict[str, int] = {}
    seen: dict[str, int] = {}
    named: list[Any] = []
    for index, row in enumerate(rows):
        if not isinstance(row, dict):
            raise PresetError(f"{source}: preset row {index + 1}: not a table")
        row = dict(row)
        if not row.get("id"):
            name = str(row.get("name", ""))
            counts[name] = counts.get(name, 0) + 1
            row["id"] = name if counts[name] == 1 else f"{name}#{counts[name]}"
        row_id = str(row["id"])
        if row_id in seen:
            raise PresetError(
                f'{source}: preset row {index + 1} (id "{row_id}"): duplicate id'
                f" (also used by row {seen[row_id] + 1})"
            )
        seen[row_id] = index
        named.append(row)
    out["plugin"] = named
    return out


def _merge(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    if "agent" in top:
        merged["agent"] = {**base.get("agent", {}), **top["agent"]}
    if "plugin" in top:
        rows = [dict(r) for r in base.get("plugin", [])]
        where = {row["id"]: index for index, row in enumerate(rows)}
        for row in top["plugin"]:
            index = where.get(row["id"])
            if index is None:
                where[row["id"]] = len(rows)
                rows.append(dict(row))
            else:
                rows[index] = {**rows[index], **row}
        merged["plugin"] = rows
    if "permissions" in top:
        below = dict(base.get("permissions", {}))
        above = top["permissions"]
        tools = {**below.get("tools", {}), **above.get("tools", {})}
        merged["permissions"] = {**below, **above, "tools": tools}
    return merged


def _from_mapping(raw: dict[str, Any], source: str, base_dir: Path | None) -> Preset:
    unknown = sorted(set(raw) - {"agent", "plugin", "permissions", "extends"})
    if unknown:
        raise PresetError(
            f"{source}: unknown top-level keys {', '.join(unknown)}"
            " (expected extends, [agent], [[plugin]], [permissions])"
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
    try:
        permissions = PermissionsConfig.model_validate(raw.get("permissions", {}))
    except ValidationError as exc:
        raise PresetError(f"{source}: [permissions]: {validation_problems(exc)}") from None
    if agent.sessions_dir is not None and base_dir is not None:
        agent.sessions_dir = str((base_dir / agent.sessions_dir).resolve())
    return Preset(agent=agent, plugin=rows, source=source, permissions=permissions)
