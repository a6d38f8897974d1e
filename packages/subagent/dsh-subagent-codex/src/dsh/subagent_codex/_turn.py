"""Folding one turn's notifications into an answer, a usage, an ending and progress.

The answer is the text of the last non-empty *completed* ``agentMessage`` of the
turn. A turn that is interrupted or fails never completes its message in
progress, so the text streamed so far (``item/agentMessage/delta``) is kept as
the partial output. :meth:`TurnTracker.progress` maps a notification to the
:class:`~dsh.subagent.SubagentProgress` vocabulary (called only while someone
watches the run).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dsh.subagent import SubagentProgress, SubagentUsage
from dsh.subagent_codex._rpc import Notification

__all__ = ["OUTPUT_EXCERPT", "TurnTracker", "usage_from"]

OUTPUT_EXCERPT = 400
"""Characters of a tool's output a ``tool_update`` progress item carries at most."""

_THINKING = frozenset({"item/reasoning/textDelta", "item/reasoning/summaryTextDelta"})


@dataclass(slots=True)
class _Message:
    text: str = ""
    completed: bool = False


@dataclass(slots=True)
class TurnTracker:
    """State of the one turn of a run, fed with every notification for its thread."""

    thread_id: str
    turn_id: str | None = None
    status: str | None = None
    """``completed`` / ``interrupted`` / ``failed`` once ``turn/completed`` arrived."""
    error: Mapping[str, Any] | None = None
    """``turn.error`` of the completed turn (``message``, ``codexErrorInfo``...)."""
    usage: SubagentUsage | None = None
    """Running totals from ``thread/tokenUsage/updated`` (None: none reported yet)."""
    errors: list[str] = field(default_factory=list)
    """``error`` notifications, described (retries included)."""
    messages: dict[str, _Message] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        """True once ``turn/completed`` arrived."""
        return self.status is not None

    def ours(self, note: Notification) -> bool:
        """Is ``note`` about this thread (or about no thread in particular)?"""
        thread = note.params.get("threadId")
        return thread is None or thread == self.thread_id

    def feed(self, note: Notification) -> bool:
        """Fold ``note`` in; True if it completed the turn."""
        if not self.ours(note):
            return False
        params, method = note.params, note.method
        if method == "item/agentMessage/delta":
            message = self.messages.setdefault(str(params.get("itemId", "")), _Message())
            if not message.completed:
                message.text += str(params.get("delta", ""))
        elif method == "item/completed":
            self._item_completed(params.get("item"))
        elif method == "turn/started":
            turn = params.get("turn")
            if isinstance(turn, Mapping) and self.turn_id is None:
                self.turn_id = str(turn.get("id"))
        elif method == "thread/tokenUsage/updated":
            usage = usage_from(params.get("tokenUsage"))
            if usage is not None:
                self.usage = usage
        elif method == "error":
            self.errors.append(_describe_error(params.get("error"), params.get("willRetry")))
        elif method == "turn/completed":
            turn = params.get("turn")
            if not isinstance(turn, Mapping):
                return False
            if self.turn_id is not None and turn.get("id") not in (None, self.turn_id):
                return False
            self.status = str(turn.get("status"))
            error = turn.get("error")
            self.error = error if isinstance(error, Mapping) else None
            for item in turn.get("items") or ():
                if isinstance(item, Mapping) and item.get("id") not in self.messages:
                    self._item_completed(item)
            return True
        return False

    def _item_completed(self, item: Any) -> None:
        if isinstance(item, Mapping) and item.get("type") == "agentMessage":
            message = self.messages.setdefault(str(item.get("id", "")), _Message())
            message.text = str(item.get("text") or "")
            message.completed = True

    def answer(self) -> str:
        """The last non-empty completed agent message ("" if none)."""
        for message in reversed(self.messages.values()):
            if message.completed and message.text.strip():
                return message.text
        return ""

    def partial(self) -> str:
        """The last non-empty agent message, completed or streamed so far."""
        for message in reversed(self.messages.values()):
            if message.text.strip():
                return message.text
        return ""

    def error_text(self) -> str:
        """What went wrong in a failed turn, from ``turn.error`` and ``error`` notes."""
        if self.error is not None:
            return _describe_error(self.error, False)
        if self.errors:
            return self.errors[-1]
        return "the turn failed without an error message"

    def progress(self, note: Notification) -> SubagentProgress | None:
        """``note`` as a progress item (None: nothing to report). Call after :meth:`feed`."""
        if not self.ours(note):
            return None
        method, params = note.method, note.params
        if method == "item/agentMessage/delta" or method in _THINKING:
            delta = params.get("delta")
            if not isinstance(delta, str) or not delta:
                return None
            if method in _THINKING:
                return SubagentProgress("thinking", text=delta)
            return SubagentProgress("text", text=delta)
        if method in ("item/started", "item/completed"):
            item = params.get("item")
            return _tool_item(item, method == "item/started") if isinstance(item, Mapping) else None
        if method == "thread/tokenUsage/updated":
            usage = usage_from(params.get("tokenUsage"))
            return SubagentProgress("usage", usage=usage) if usage is not None else None
        if (method == "error" and params.get("willRetry")) or method == "warning":
            text = self.errors[-1] if method == "error" else str(params.get("message") or "")
            return SubagentProgress("notice", text=text[:OUTPUT_EXCERPT]) if text else None
        return None


def _tool_item(item: Mapping[str, Any], started: bool) -> SubagentProgress | None:
    """A ``tool_call`` (started) or ``tool_update`` (completed) for a tool-like item."""
    kind, status = item.get("type"), item.get("status")
    output: Any = None
    arguments: Any
    if kind == "commandExecution":
        command = str(item.get("command") or "")
        name, title, arguments = "exec_command", command, {"command": command}
        exit_code = item.get("exitCode")
        failed = status in ("failed", "declined") or exit_code not in (None, 0)
        output = item.get("aggregatedOutput")
    elif kind == "fileChange":
        changes = item.get("changes") or ()
        paths = [str(c.get("path")) for c in changes if isinstance(c, Mapping)]
        name, title, arguments = "apply_patch", ", ".join(paths), {"paths": paths}
        failed = status != "completed"
    elif kind == "mcpToolCall":
        name, arguments = str(item.get("tool") or ""), item.get("arguments")
        title = f"{item.get('server')}/{name}"
        error = item.get("error")
        failed = status != "completed" or error is not None
        output = error.get("message") if isinstance(error, Mapping) else None
    else:
        return None
    call_id = str(item.get("id"))
    if started:
        return SubagentProgress(
            "tool_call", tool_call_id=call_id, name=name, title=title, arguments=arguments
        )
    text = output if isinstance(output, str) and output else None
    if text is not None and len(text) > OUTPUT_EXCERPT:
        text = text[: OUTPUT_EXCERPT - 1] + "…"
    return SubagentProgress(
        "tool_update",
        tool_call_id=call_id,
        name=name,
        status="failed" if failed else "completed",
        text=text,
    )


def _describe_error(error: Any, will_retry: Any) -> str:
    if not isinstance(error, Mapping):
        return str(error)
    text = str(error.get("message") or "unknown error")
    info = error.get("codexErrorInfo")
    if isinstance(info, Mapping):
        info = ", ".join(f"{key}: {value}" if value else str(key) for key, value in info.items())
    if info:
        text += f" [{info}]"
    details = error.get("additionalDetails")
    if details:
        text += f" ({str(details)[:500]})"
    if will_retry:
        text += " (codex will retry)"
    return text


def usage_from(token_usage: Any) -> SubagentUsage | None:
    """``thread/tokenUsage/updated``'s ``tokenUsage.total`` as a :class:`SubagentUsage`."""
    total = token_usage.get("total") if isinstance(token_usage, Mapping) else None
    if not isinstance(total, Mapping):
        return None

    def count(key: str) -> int:
        value = total.get(key)
        return value if isinstance(value, int) and value >= 0 else 0

    return SubagentUsage(
        input_tokens=count("inputTokens"),
        output_tokens=count("outputTokens"),
        cached_input_tokens=count("cachedInputTokens"),
        reasoning_tokens=count("reasoningOutputTokens"),
    )
