"""Folding one turn's notifications into an answer, a usage and an ending.

The answer is the text of the last non-empty *completed* ``agentMessage`` of the
turn. A turn that is interrupted or fails never completes its message in
progress, so the text streamed so far (``item/agentMessage/delta``) is kept as
the partial output.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dsh.subagent_codex.rpc import Notification

__all__ = ["TurnTracker", "usage_from"]


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
    usage: dict[str, int] | None = None
    errors: list[str] = field(default_factory=list)
    """``error`` notifications, described (retries included)."""
    warnings: list[str] = field(default_factory=list)
    messages: dict[str, _Message] = field(default_factory=dict)
    commands: list[Mapping[str, Any]] = field(default_factory=list)
    """Completed ``commandExecution`` / ``fileChange`` items (for tests and logs)."""

    @property
    def done(self) -> bool:
        """True once ``turn/completed`` arrived."""
        return self.status is not None

    def feed(self, note: Notification) -> bool:
        """Fold ``note`` in; True if it completed the turn."""
        params = note.params
        thread = params.get("threadId")
        if thread is not None and thread != self.thread_id:
            return False
        method = note.method
        if method == "item/agentMessage/delta":
            item_id = str(params.get("itemId", ""))
            message = self.messages.setdefault(item_id, _Message())
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
        elif method in ("warning", "configWarning", "deprecationNotice"):
            text = params.get("message") or params.get("summary")
            if text:
                self.warnings.append(str(text)[:300])
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
        if not isinstance(item, Mapping):
            return
        kind = item.get("type")
        if kind == "agentMessage":
            message = self.messages.setdefault(str(item.get("id", "")), _Message())
            message.text = str(item.get("text") or "")
            message.completed = True
        elif kind in ("commandExecution", "fileChange"):
            self.commands.append(item)

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


def usage_from(token_usage: Any) -> dict[str, int] | None:
    """``thread/tokenUsage/updated``'s ``tokenUsage.total`` in dsh's usage keys."""
    if not isinstance(token_usage, Mapping):
        return None
    total = token_usage.get("total")
    if not isinstance(total, Mapping):
        return None
    keys = {
        "input_tokens": "inputTokens",
        "output_tokens": "outputTokens",
        "cached_input_tokens": "cachedInputTokens",
        "reasoning_output_tokens": "reasoningOutputTokens",
        "total_tokens": "totalTokens",
    }
    usage = {ours: int(total.get(theirs) or 0) for ours, theirs in keys.items()}
    window = token_usage.get("modelContextWindow")
    if isinstance(window, int):
        usage["model_context_window"] = window
    return usage
