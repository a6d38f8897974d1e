"""Folding the agent's streamed message chunks into the run's output, in wire order.

acp runs every incoming notification in a task of its own, so a client whose
``session_update`` awaits anything can see chunks out of order. The fold here
is fed by a connection *observer*, which acp calls synchronously from its
receive loop for every raw incoming message, in the order the lines arrived:
the order is the wire's, whatever the handler tasks do.

The output is the text of the last non-empty agent message of the turn (the
same rule as every other provider: "the content of the last non-empty assistant
message"). A new message starts when ``messageId`` changes or after a tool call,
so narration before a tool call ("Let me look...") is not glued to the answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["MessageFold"]


class MessageFold:
    """The agent's message text for one ACP session, folded as it streams in."""

    __slots__ = (
        "_boundary",
        "_current",
        "_current_id",
        "_last",
        "chunks",
        "session_id",
        "tool_calls",
        "updates",
    )

    def __init__(self) -> None:
        self.session_id: str | None = None
        """Only updates for this session are folded (set once the session exists)."""
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

    def observe(self, event: Any) -> None:
        """Connection observer: called with every raw message (``acp`` ``StreamEvent``)."""
        if getattr(event, "direction", None) != "incoming":
            return
        self.feed(event.message)

    def feed(self, message: Mapping[str, Any]) -> None:
        """Fold one raw JSON-RPC message if it is an update of our session."""
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
        if kind == "agent_message_chunk":
            content = update.get("content")
            if not isinstance(content, Mapping) or content.get("type") != "text":
                return
            text = content.get("text")
            if not isinstance(text, str) or not text:
                return
            message_id = update.get("messageId")
            if self._boundary or message_id != self._current_id:
                self._close_message()
                self._current_id = message_id
                self._boundary = False
            self._current.append(text)
            self.chunks += 1
        elif kind == "tool_call":
            self.tool_calls += 1
            self._boundary = True

    def _close_message(self) -> None:
        if self._current:
            self._last = self._current
            self._current = []

    def output(self) -> str:
        """The text of the last non-empty agent message so far."""
        return "".join(self._current or self._last)

    def reset(self) -> None:
        """Forget the text folded so far (a new prompt)."""
        self._current = []
        self._last = []
        self._current_id = None
        self._boundary = False
