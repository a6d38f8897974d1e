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

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from dsh.core._errors import DshError
from dsh.core._llm import ModelConfig
from dsh.core._permission_config import PermissionsConfig
from dsh.core._sandbox import SandboxConfig
from dsh.core._suggest import did_you_mean
from dsh.core._validation import validation_problems

__all__ = [
    "DEFAULT_PERSONA",
    "MAX_EXTENDS_DEPTH",
    "PRESETS_ENTRY_POINT_GROUP",
    "AgentDefaults",
    "PluginRow",
    "Preset",
    "PresetError",
    "load_named_preset",
    "load_preset",
    "merged_raw",
    "named_preset_text",
    "named_presets",
    "parse_preset",
    "toml_table",
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
    _origin: tuple[str, int] | None = PrivateAttr(default=None)
    """The preset file the row was last written in, and its index there (through
    ``extends``, a row keeps the file and number a user can find it by)."""

    def describe(self, index: int | None = None) -> str:
        """How error messages name this row: ``dsh.toml row 1 (id "...", plugin "...")``,
        the file the row is in and its number there (``preset row N``, N counted in the
        preset, for a preset that is not from a file)."""
        if self._origin is not None:
            where = row_where(*self._origin)
        else:
            where = f"preset row {index + 1}" if index is not None else "plugin row"
        return f'{where} (id "{self.id}", plugin "{self.name}")'


def row_where(source: str, index: int) -> str:
    """``/path/dsh.toml row 2`` for the row at ``index`` of the preset read from
    ``source``; ``preset standard row 2`` for a named preset read as text, ``preset row
    2`` for preset text without a name."""
    if source.startswith("<") and source.endswith(">"):
        inner = source[1:-1]
        return (
            f"{inner} row {index + 1}" if inner.startswith("preset ") else f"preset row {index + 1}"
        )
    return f"{source} row {index + 1}"


_ORIGIN = "\0origin"
"""The key under which a raw row carries its origin (source, index) through the merge."""


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
    sandbox: SandboxConfig = SandboxConfig()
    """The ``[sandbox]`` table: how far tool processes reach (see :class:`SandboxPolicy`)."""
    source: str = "<memory>"
    files: list[str] = []
    """Every preset file this preset was read from (its own, then the files it extends),
    as absolute paths: the file tools and the sandbox keep them read-only."""

    def enabled_rows(self) -> list[tuple[int, PluginRow]]:
        """(index, row) of every row not disabled."""
        return [(i, row) for i, row in enumerate(self.plugin) if not row.disabled]


def parse_preset(text: str, *, source: str = "<string>", base_dir: Path | None = None) -> Preset:
    """Parse preset TOML text (following ``extends``). Errors name the source and the row.

    ``base_dir`` is the folder relative paths resolve against (default: the current
    directory for ``extends``; ``sessions_dir`` stays as written)."""
    files: list[str] = []
    raw = _layered(toml_table(text, source), source, base_dir, (), files)
    preset = _from_mapping(raw, source, base_dir)
    preset.files = files
    return preset


def load_preset(path: str | Path) -> Preset:
    """Load a preset file; a relative ``sessions_dir`` or ``extends`` path is resolved
    against its folder."""
    file = Path(path)
    preset = parse_preset(_read(file), source=str(file), base_dir=file.resolve().parent)
    preset.files.insert(0, str(file.resolve()))
    return preset


def named_presets() -> dict[str, str]:
    """Installed named presets (the ``dsh.presets`` entry points): name → where from."""
    return {ep.name: ep.value for ep in entry_points(group=PRESETS_ENTRY_POINT_GROUP)}


def load_named_preset(name: str) -> Preset:
    """The installed preset called ``name``; :class:`PresetError` listing the installed
    ones if there is none."""
    text, source, base_dir = named_preset_text(name)
    return parse_preset(text, source=source, base_dir=base_dir)


def merged_raw(text: str, source: str, base_dir: Path | None) -> dict[str, Any]:
    """The raw mapping of a preset's text with its ``extends`` chain merged in (what
    :mod:`dsh.core._trust` summarises), validated as :func:`parse_preset` does."""
    return _without_origins(_layered(toml_table(text, source), source, base_dir, (), []))


def _without_origins(raw: dict[str, Any]) -> dict[str, Any]:
    rows = raw.get("plugin")
    if isinstance(rows, list):
        raw["plugin"] = [
            {k: v for k, v in row.items() if k != _ORIGIN} if isinstance(row, dict) else row
            for row in rows
        ]
    return raw


# -- extends -----------------------------------------------------------------------------


def toml_table(text: str, source: str) -> dict[str, Any]:
    """``text`` parsed as TOML; :class:`PresetError` naming ``source`` if it is not."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PresetError(f"{source}: not valid TOML: {exc}") from None


def _read(file: Path) -> str:
    try:
        return file.read_text(encoding="utf-8")
    except OSError as exc:
        raise PresetError(f"cannot read preset {file}: {exc.strerror or exc}") from None


def named_preset_text(name: str) -> tuple[str, str, Path | None]:
    """The installed preset ``name``: its TOML text, the source errors name it by, and
    the folder its relative paths resolve against (None for a resource)."""
    found = [ep for ep in entry_points(group=PRESETS_ENTRY_POINT_GROUP) if ep.name == name]
    if not found:
        names = named_presets()
        hint = did_you_mean(name, names)
        installed = ", ".join(sorted(names)) or "none"
        raise PresetError(
            f'no preset named "{name}"'
            + (f"; {hint}" if hint else "")
            + f" (installed: {installed})"
        )
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
    raw: dict[str, Any],
    source: str,
    base_dir: Path | None,
    chain: tuple[str, ...],
    files: list[str],
) -> dict[str, Any]:
    """``raw`` with its ``extends`` chain merged in (base first), every row with an
    explicit id and relative paths resolved per layer; validated layer by layer so an
    error names the file it is in."""
    chain = (*chain, source)
    _check_top_level(raw, source)  # also of a layer with extends: the merge keeps known keys
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
        base_raw = toml_table(_read(file), base_source)
        files.append(str(file.resolve()))
        base_base_dir: Path | None = file.resolve().parent
    else:
        try:
            text, base_source, base_base_dir = named_preset_text(extends)
        except PresetError as exc:
            raise PresetError(f"{source}: extends: {exc}") from None
        if base_source in chain:
            raise PresetError(f"{source}: extends cycle: {' -> '.join((*chain, base_source))}")
        base_raw = toml_table(text, base_source)
    try:
        base = _layered(base_raw, base_source, base_base_dir, chain, files)
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
                    f"{where}: {PRESET_DIR} is only known for a preset read from"
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
            row["config"] = expand(
                row["config"], f'{row_where(source, index)} (id "{row.get("id")}")'
            )


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
            raise PresetError(f"{row_where(source, index)}: not a table")
        row = dict(row)
        row[_ORIGIN] = (source, index)
        if not row.get("id"):
            name = str(row.get("name", ""))
            counts[name] = counts.get(name, 0) + 1
            row["id"] = name if counts[name] == 1 else f"{name}#{counts[name]}"
        row_id = str(row["id"])
        if row_id in seen:
            raise PresetError(
                f'{row_where(source, index)} (id "{row_id}"): duplicate id'
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
    if "sandbox" in top:
        merged["sandbox"] = {**base.get("sandbox", {}), **top["sandbox"]}
    return merged


def _check_top_level(raw: Mapping[str, Any], source: str) -> None:
    known = ("extends", "agent", "plugin", "permissions", "sandbox")
    unknown = sorted(set(raw) - set(known))
    if unknown:
        hints = [f'"{key}": {hint}' for key in unknown if (hint := did_you_mean(key, known))]
        raise PresetError(
            f"{source}: unknown top-level keys {', '.join(unknown)}"
            + (f" ({'; '.join(hints)})" if hints else "")
            + " (expected extends, [agent], [[plugin]], [permissions], [sandbox])"
        )


def _from_mapping(raw: dict[str, Any], source: str, base_dir: Path | None) -> Preset:
    _check_top_level(raw, source)
    rows_raw = raw.get("plugin", [])
    if not isinstance(rows_raw, list):
        raise PresetError(f"{source}: 'plugin' must be an array of tables ([[plugin]])")
    rows: list[PluginRow] = []
    seen: dict[str, int] = {}
    counts: dict[str, int] = {}
    for index, row_raw in enumerate(rows_raw):
        origin: tuple[str, int] | None = None
        if isinstance(row_raw, dict) and _ORIGIN in row_raw:
            origin = row_raw[_ORIGIN]
            row_raw = {k: v for k, v in row_raw.items() if k != _ORIGIN}
        label = row_where(*(origin or (source, index)))
        if isinstance(row_raw, dict) and "name" in row_raw:
            label += f' (plugin "{row_raw["name"]}")'
        try:
            row = PluginRow.model_validate(row_raw)
        except ValidationError as exc:
            raise PresetError(f"{label}: {validation_problems(exc, PluginRow)}") from None
        row._origin = origin or (source, index)
        if not row.id:
            counts[row.name] = counts.get(row.name, 0) + 1
            row.id = row.name if counts[row.name] == 1 else f"{row.name}#{counts[row.name]}"
        if row.id in seen:
            first = seen[row.id] + 1
            raise PresetError(f"{row.describe(index)}: duplicate id (also used by row {first})")
        seen[row.id] = index
        rows.append(row)
    try:
        agent = AgentDefaults.model_validate(raw.get("agent", {}))
    except ValidationError as exc:
        raise PresetError(f"{source}: [agent]: {validation_problems(exc, AgentDefaults)}") from None
    try:
        permissions = PermissionsConfig.model_validate(raw.get("permissions", {}))
    except ValidationError as exc:
        raise PresetError(
            f"{source}: [permissions]: {validation_problems(exc, PermissionsConfig)}"
        ) from None
    try:
        sandbox = SandboxConfig.model_validate(raw.get("sandbox", {}))
    except ValidationError as exc:
        raise PresetError(
            f"{source}: [sandbox]: {validation_problems(exc, SandboxConfig)}"
        ) from None
    if agent.sessions_dir is not None and base_dir is not None:
        agent.sessions_dir = str((base_dir / agent.sessions_dir).resolve())
    return Preset(agent=agent, plugin=rows, source=source, permissions=permissions, sandbox=sandbox)
