"""Folding the agent's ``session/update`` notifications: the output, and progress.

Updates arrive in wire order (the connection calls :meth:`SessionFold.feed`
synchronously from its read loop). The output is the text of the last non-empty
agent message of the turn, the same rule as every other provider: a new message
starts when ``messageId`` changes or after a tool call, so narration before a
tool call ("Let me look...") is not glued to the answer. A ``notice`` update
(agents send those once the client declares ``session.notices``) is never output.

Each update also maps to :class:`~dsh.subagent.SubagentProgress` items, built
only while someone listens: ``agent_message_chunk`` → ``text``,
``agent_thought_chunk`` → ``thinking``, ``tool_call`` / ``tool_call_update`` →
``tool_call`` / ``tool_update``, ``plan`` and ``notice`` → ``notice``,
``usage_update`` → ``usage``. An update that carries ``_meta.dsh.progress`` (a
``dsh acp`` child reporting its own nested delegations) is passed on as the item
it names, with its path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from dsh.subagent import SubagentProgress, SubagentUsage

__all__ = ["SessionFold"]

_EXCERPT = 400

_STATUS = {
    "pending": "running",
    "in_progress": "running",
    "completed": "completed",
    "failed": "failed",
}


class SessionFold:
    """One ACP session's updates: the output so far, and progress items."""

    __slots__ = (
        "_boundary",
        "_current",
        "_current_id",
        "_last",
        "chunks",
        "emit",
        "notices",
        "on_usage",
        "session_id",
        "tool_calls",
        "updates",
    )

    def __init__(self) -> None:
        self.session_id: str | None = None
        """Only updates for this session are folded (set once the session exists)."""
        self.emit: Callable[[SubagentProgress], None] | None = None
        """Where progress items go (None: nobody listens, none are built)."""
        self._current: list[str] = []
        self._current_id: object = None
        self._last: list[str] = []
        self._boundary = False
        self.chunks = 0
        """Text chunks folded."""
        self.tool_calls = 0
        """Tool calls the agent reported."""
        self.updates = 0
        """Session updates seen for the session."""
        self.notices: list[str] = []
        """Notices the agent sent (kept for the diagnostic, never the output)."""
        self.on_usage: Callable[[SubagentUsage], None] | None = None
        """Told the turn's running usage a dsh child reports (``usage_update`` with
        ``_meta.dsh.usage``), for the run's budget (None: nobody)."""

    def feed(self, message: Mapping[str, Any]) -> None:
        """Fold one notification if it is an update of our session."""
        if message.get("method") != "session/update" or self.session_id is None:
            return
        params = message.get("params")
        if not isinstance(params, Mapping) or params.get("sessionId") != self.session_id:
            return
        update = params.get("update")
        if not isinstance(update, Mapping):
            return
        self.updates += 1
        kind = update.get("sessionUpdate")
        emit = self.emit
        relayed = _relayed(update) if emit is not None else None
        if kind == "agent_message_chunk":
            text = _text(update.get("content"))
            if text:
                self._chunk(text, update.get("messageId"))
                if emit is not None and relayed is None:
                    emit(SubagentProgress("text", text=text))
        elif kind == "tool_call":
            self.tool_calls += 1
            self._boundary = True
            if emit is not None and relayed is None:
                emit(
                    SubagentProgress(
                        "tool_call",
                        tool_call_id=_str(update.get("toolCallId")),
                        name=_str(update.get("kind")),
                        title=_str(update.get("title")),
                        arguments=update.get("rawInput"),
                    )
                )
        elif kind == "usage_update" and self.on_usage is not None:
            running = _dsh_usage(update)
            if running is not None:
                self.on_usage(running)
            if emit is not None and relayed is None:
                emit(SubagentProgress("usage", usage=_usage_update(update)))
        elif kind == "notice":
            text = " — ".join(
                part
                for part in (_str(update.get("title")), _str(update.get("description")))
                if part
            )
            if text:
                self.notices.append(text)
                if emit is not None:
                    emit(SubagentProgress("notice", text=text))
        elif emit is None or relayed is not None:
            pass
        elif kind == "agent_thought_chunk":
            text = _text(update.get("content"))
            if text:
                emit(SubagentProgress("thinking", text=text))
        elif kind == "tool_call_update":
            status = _STATUS.get(str(update.get("status")))
            output = _tool_text(update.get("content"))
            if status is not None or output:
                emit(
                    SubagentProgress(
                        "tool_update",
                        tool_call_id=_str(update.get("toolCallId")),
                        status=status,  # type: ignore[arg-type]
                        text=output,
                    )
                )
        elif kind == "plan":
            entries = update.get("entries")
            if isinstance(entries, list) and entries:
                lines = [
                    f"[{entry.get('status', '?')}] {entry.get('content', '')}"
                    for entry in entries
                    if isinstance(entry, Mapping)
                ]
                emit(SubagentProgress("notice", text="plan:\n" + "\n".join(lines)))
        elif kind == "usage_update":
            emit(SubagentProgress("usage", usage=_usage_update(update)))
        if relayed is not None and emit is not None:
            emit(relayed)

    def _chunk(self, text: str, message_id: object) -> None:
        if self._boundary or message_id != self._current_id:
            if self._current:
                self._last = self._current
                self._current = []
            self._current_id = message_id
            self._boundary = False
        self._current.append(text)
        self.chunks += 1

    def output(self) -> str:
        """The text of the last non-empty agent message so far."""
        return "".join(self._current or self._last)


def _relayed(update: Mapping[str, Any]) -> SubagentProgress | None:
    """The item a ``dsh acp`` child put under ``_meta.dsh.progress`` (a nested run's)."""
    meta = update.get("_meta")
    if not isinstance(meta, Mapping):
        return None
    dsh = meta.get("dsh")
    if not isinstance(dsh, Mapping):
        return None
    item = dsh.get("progress")
    if not isinstance(item, Mapping):
        return None
    try:
        return SubagentProgress.from_json(item)
    except ValueError:
        return None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _text(content: object) -> str:
    if isinstance(content, Mapping) and content.get("type") == "text":
        text = content.get("text")
        if isinstance(text, str):
            return text
    return ""


def _tool_text(content: object) -> str | None:
    if not isinstance(content, list):
        return None
    parts: list[str] = []
    for item in content:
        if isinstance(item, Mapping) and item.get("type") == "content":
            text = _text(item.get("content"))
            if text:
                parts.append(text)
    if not parts:
        return None
    text = "\n".join(parts)
    return text if len(text) <= _EXCERPT else text[:_EXCERPT] + "…"


def _dsh_usage(update: Mapping[str, Any]) -> SubagentUsage | None:
    """The running usage a dsh child puts in ``_meta.dsh.usage`` (None: none)."""
    meta = update.get("_meta")
    if isinstance(meta, Mapping) and isinstance(meta.get("dsh"), Mapping):
        usage = meta["dsh"].get("usage")
        if isinstance(usage, Mapping):
            try:
                return SubagentUsage.from_json(usage)
            except (TypeError, ValueError):
                return None
    return None


def _usage_update(update: Mapping[str, Any]) -> SubagentUsage:
    running = _dsh_usage(update)
    if running is not None:
        return running
    cost = update.get("cost")
    amount = None
    if isinstance(cost, Mapping) and cost.get("currency") == "USD":
        value = cost.get("amount")
        if isinstance(value, int | float) and not isinstance(value, bool):
            amount = float(value)
    return SubagentUsage(cost_usd=amount, incomplete=True)
