"""A delegation's progress items as the short messages of MCP progress notifications.

Text and thinking deltas are gathered into one message per line (or per
:data:`_SHORT` characters, or until another kind of item comes); every other item is
one message. A nested run's items start with its path (``[run/…] ``); a
``child_start`` / ``child_end`` item names the child itself, under its parent's path.
"""

from __future__ import annotations

from dsh.subagent import SubagentProgress

__all__ = ["ProgressLines", "progress_message"]

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
    path = item.path[:-1] if kind in ("child_start", "child_end") else item.path
    return f"[{'/'.join(path)}] {body}" if path else body


class ProgressLines:
    """Turns progress items into messages, gathering text deltas into lines."""

    def __init__(self) -> None:
        self._kind: str | None = None
        self._path: tuple[str, ...] = ()
        self._text: list[str] = []
        self._size = 0

    def feed(self, item: SubagentProgress) -> list[str]:
        """The messages ready once ``item`` is in (none while a line is gathering)."""
        if item.kind in ("text", "thinking"):
            out = []
            if (item.kind, item.path) != (self._kind, self._path):
                out = self.flush()
                self._kind, self._path = item.kind, item.path
            text = item.text or ""
            self._text.append(text)
            self._size += len(text)
            if "\n" in text or self._size >= _SHORT:
                out += self.flush()
            return out
        out = self.flush()
        message = progress_message(item)
        return [*out, message] if message is not None else out

    def flush(self) -> list[str]:
        """The gathered text as a message (nothing when there is none)."""
        if self._kind is None:
            return []
        item = SubagentProgress(self._kind, self._path, text="".join(self._text))  # type: ignore[arg-type]
        self._kind, self._text, self._size = None, [], 0
        message = progress_message(item)
        return [message] if message is not None else []
