"""The permission policy as configured (``allow``, ``ask`` or ``deny`` per tool: the
preset's ``[permissions]`` table), an approver's decision and the one-line titles
requests are shown with. Below presets and tools, which name them; the deciding
(:class:`~dsh.core.Permissions`) is in :mod:`dsh.core._permissions`."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

__all__ = [
    "PermissionDecision",
    "PermissionPolicy",
    "PermissionsConfig",
    "default_title",
    "visible_line",
]

PermissionPolicy = Literal["allow", "ask", "deny"]


class PermissionsConfig(BaseModel):
    """The preset's ``[permissions]`` table."""

    model_config = ConfigDict(extra="forbid")

    default: PermissionPolicy | None = None
    """Policy of governed tools not listed in ``tools`` (unset: each tool's default)."""
    tools: dict[str, PermissionPolicy] = {}
    """Policy per tool name."""


@dataclass(frozen=True, slots=True)
class PermissionDecision:
    """An approver's answer. ``always``: allow this tool without asking again (for the
    rest of this agent tree's life)."""

    allowed: bool
    reason: str = ""
    always: bool = False


def default_title(name: str, arguments: Any) -> str:
    """``name`` and the arguments, short (for tools that give no title of their own)."""
    raw = arguments.model_dump() if isinstance(arguments, BaseModel) else arguments
    try:
        text = json.dumps(raw, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = str(raw)
    if len(text) > 160:
        text = text[:160] + "…"
    return f"{name} {text}"


# Controls (C0, DEL, C1) and the bidirectional formatting characters, which reorder
# what a terminal or an editor displays.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\r": "\\r", "\n": "\\n", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def visible_line(text: str) -> str:
    """``text`` with every control character shown as an escape (``\\x1b``, ``\\r``,
    ``\\n``): one line that cannot drive the terminal or editor showing it."""
    return _UNSAFE.sub(_escape, text)
