"""A delegation's progress items as the short messages of MCP progress notifications."""

from __future__ import annotations

from dsh.subagent import SubagentProgress

__all__ = ["progress_message"]

_SHORT = 200
"""Characters of text, tool output or arguments a message quotes at most."""


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _SHORT else text[: _SHORT - 1] + "…"


def progress_message(item: SubagentProgress) -> str | None:
    """One line for ``item`` (``[run/…]`` first for a nested run's item); None for an
    item not worth a notification (an empty delta)."""
    kind = item.kind
    if kind in ("text", "thinking", "notice"):
        if not item.text or not item.text.strip():
            return None
        body = _short(item.text) if kind != "thinking" else f"thinking: {_short(item.text)}"
    elif kind == "tool_call":
        body = f"tool call: {_short(item.title or item.name or 'tool')}"
    elif kind == "tool_update":
        body = f"tool {item.status or 'update'}"
        if item.text:
            body += f": {_short(item.text)}"
    elif kind == "usage":
        usage = item.usage
        if usage is None:
            return None
        body = f"usage: {usage.input_tokens} input, {usage.output_tokens} output tokens"
        if usage.cost_usd is not None:
            body += f", ${usage.cost_usd:.4f}"
    elif kind == "child_start":
        body = f"child {item.run_id} started: {_short(item.label or '')} ({item.provider})"
    elif kind == "child_end":
        body = f"child {item.run_id} ended: {item.stop_reason or 'unknown'}"
    elif kind == "queued":
        body = f"queued (position {item.position})"
    else:
        return None
    return f"[{'/'.join(item.path)}] {body}" if item.path else body
