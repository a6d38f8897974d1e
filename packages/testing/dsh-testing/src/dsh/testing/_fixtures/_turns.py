"""Scripted turns with one tool call, and what tests read of them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dsh.core import Agent, ModelRequest, ScriptedAdapter, ScriptedReply
from dsh.core.models import BoundModel
from dsh.testing.scripting import call

__all__ = [
    "ONE_TOOL_CALL_TURN",
    "call_then_echo",
    "last_user_kind",
    "result_text",
    "tool_results",
]

ONE_TOOL_CALL_TURN = (
    "user/message",
    "turn/start",
    "assistant/message",
    "tool/call",
    "tool/result",
    "assistant/message",
    "turn/end",
)
"""The event types of a turn with one tool call, in order."""


def call_then_echo(name: str, **arguments: Any) -> BoundModel:
    """A scripted model that calls tool ``name`` with ``arguments``, then says
    ``saw: <the tool's result>``."""
    replies = [
        ScriptedReply(tool_calls=[call(name, **arguments)]),
        ScriptedReply(text="saw: {tool_results}"),
    ]
    return BoundModel(ScriptedAdapter(replies))


def tool_results(agent: Agent) -> list[Mapping[str, Any]]:
    """The data of the ``tool/result`` events of ``agent``'s session, in order."""
    return [e.data for e in agent.session.events if e.type == "tool/result"]


def result_text(data: Mapping[str, Any]) -> str:
    """The text blocks of a tool result's content, joined."""
    return "".join(block.get("text", "") for block in data["content"])


def last_user_kind(request: ModelRequest) -> str | None:
    """``kind`` of the request's latest user message (``notice``...; None for a plain
    message)."""
    for event in reversed(request.events):
        if event.type == "user/message":
            kind = event.data.get("kind")
            return str(kind) if kind is not None else None
    return None
