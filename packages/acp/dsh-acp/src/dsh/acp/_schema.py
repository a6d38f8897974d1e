"""Session updates built from the ``acp`` schema models (``dsh acp`` and the test kit's
mock agent build theirs here).

The models are built with their discriminators set, not with the ``acp`` helper
functions: agent-client-protocol 1.0 removed those (``start_tool_call``,
``update_agent_message_text``...), and these work with 0.12 and 1.0.
"""

from __future__ import annotations

from typing import Any

from acp.schema import (
    AgentMessageChunk,
    ContentToolCallContent,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
    ToolCallStatus,
    ToolKind,
)

__all__ = ["agent_message", "text_block", "tool_call_progress", "tool_call_start"]


def text_block(text: str) -> TextContentBlock:
    """A text content block."""
    return TextContentBlock(type="text", text=text)


def agent_message(text: str, message_id: str | None = None) -> AgentMessageChunk:
    """An ``agent_message_chunk`` update carrying ``text`` (of message ``message_id``)."""
    return AgentMessageChunk(
        session_update="agent_message_chunk", content=text_block(text), message_id=message_id
    )


def tool_call_start(
    call_id: str,
    title: str,
    kind: ToolKind,
    status: ToolCallStatus,
    *,
    raw_input: Any = None,
    meta: dict[str, Any] | None = None,
) -> ToolCallStart:
    """A ``tool_call`` update: the call ``call_id`` begins (``meta``: its ``_meta``)."""
    return ToolCallStart(
        session_update="tool_call",
        tool_call_id=call_id,
        title=title,
        kind=kind,
        status=status,
        raw_input=raw_input,
        field_meta=meta,
    )


def tool_call_progress(
    call_id: str,
    status: ToolCallStatus | None,
    *,
    content: list[ContentToolCallContent] | None = None,
    meta: dict[str, Any] | None = None,
) -> ToolCallProgress:
    """A ``tool_call_update`` update: the call's new ``status`` (None: unchanged)."""
    return ToolCallProgress(
        session_update="tool_call_update",
        tool_call_id=call_id,
        status=status,
        content=list(content) if content is not None else None,
        field_meta=meta,
    )
