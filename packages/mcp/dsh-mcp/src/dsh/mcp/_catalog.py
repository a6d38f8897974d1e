"""What ``dsh mcp`` serves: one MCP tool per ``dsh-tool-subagent`` row of the preset,
plus the preset's tools the ``dsh-mcp`` row lists in ``expose``.

A subagent row's MCP tool has the row's tool name and description (those of the tool
the row registered), the ``{description, prompt}`` input schema, and the row's
``output_schema`` as its ``outputSchema``. An exposed tool has its dsh name,
description and input schema.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import mcp_types as types

from dsh.core import Context, Preset, Tool
from dsh.mcp._config import serve_config
from dsh.tool_subagent import SubagentToolConfig

__all__ = ["SUBAGENT_ROW", "Catalog", "Served", "build_catalog"]

SUBAGENT_ROW = "dsh-tool-subagent"
"""The plugin whose rows become MCP tools."""

_MODEL_ONLY = ("run_in_background",)
"""Arguments of a subagent tool that only a dsh model gets (an MCP call waits)."""


@dataclass(frozen=True, slots=True)
class Served:
    """One MCP tool: the dsh tool behind it, and the subagent row when it is one."""

    tool: Tool
    row: SubagentToolConfig | None

    def describe(self) -> types.Tool:
        """The tool as ``tools/list`` shows it."""
        schema = dict(self.tool.input_schema)
        output: dict[str, Any] | None = None
        if self.row is not None:
            properties = {
                key: value
                for key, value in dict(schema.get("properties") or {}).items()
                if key not in _MODEL_ONLY
            }
            schema = {**schema, "properties": properties, "additionalProperties": False}
            output = self.row.output_schema
        return types.Tool(
            name=self.tool.name,
            description=self.tool.description,
            input_schema=schema,
            output_schema=output,
        )


@dataclass(frozen=True, slots=True)
class Catalog:
    """The served tools by name."""

    tools: Mapping[str, Served]

    def listing(self) -> list[types.Tool]:
        """Every served tool as ``tools/list`` shows it."""
        return [served.describe() for served in self.tools.values()]


def build_catalog(ctx: Context, preset: Preset) -> Catalog:
    """The tools ``preset`` (opened as ``ctx``) serves (see the module docstring); a subagent row
    whose tool is not registered (its provider went away) is left out."""
    tools: dict[str, Served] = {}
    for _, row in preset.enabled_rows():
        if row.name != SUBAGENT_ROW:
            continue
        config = SubagentToolConfig.model_validate(row.config)
        tool = ctx.tools.get(config.tool_name)
        if tool is not None:
            tools[config.tool_name] = Served(tool, config)
    for name in serve_config(ctx).expose:
        tool = ctx.tools.get(name)
        if tool is not None and name not in tools:
            tools[name] = Served(tool, None)
    return Catalog(tools)
