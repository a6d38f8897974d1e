"""Server-sent events: encoding for fake servers, parsing for tests.

Every model API streams SSE: OpenAI chat completions send bare ``data:`` lines
ending with ``data: [DONE]``; the OpenAI Responses and Anthropic Messages APIs
name each event (``event: response.created``, ``event: message_start``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["SSE_DONE", "SSEEvent", "parse_sse"]


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One server-sent event.

    ``data`` that is not a ``str`` is sent as compact JSON; a ``str`` is sent as
    is (one ``data:`` line per line of text). ``event`` and ``id`` are optional.
    """

    data: Any
    event: str | None = None
    id: str | None = None

    def encode(self) -> bytes:
        """The wire form, ending with the blank line that dispatches the event."""
        text = self.data if isinstance(self.data, str) else _compact(self.data)
        lines: list[str] = []
        if self.event is not None:
            lines.append(f"event: {self.event}")
        if self.id is not None:
            lines.append(f"id: {self.id}")
        lines.extend(f"data: {line}" for line in text.split("\n"))
        return ("\n".join(lines) + "\n\n").encode()

    def json(self) -> Any:
        """``data`` parsed as JSON (when it came from :func:`parse_sse` as text)."""
        return json.loads(self.data) if isinstance(self.data, str) else self.data


SSE_DONE = SSEEvent("[DONE]")
"""The ``data: [DONE]`` sentinel that ends an OpenAI chat-completions stream."""


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def parse_sse(payload: str | bytes) -> list[SSEEvent]:
    """Parse an SSE body into events (``data`` kept as text; comments skipped).

    Follows the SSE rules tests rely on: lines end with LF, CRLF or CR; a blank
    line dispatches; several ``data:`` lines join with LF; one space after the
    colon is dropped; an unterminated last event is still returned.
    """
    text = payload.decode() if isinstance(payload, bytes) else payload
    events: list[SSEEvent] = []
    data: list[str] = []
    event: str | None = None
    event_id: str | None = None
    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        if not line:
            if data:
                events.append(SSEEvent("\n".join(data), event, event_id))
            data, event, event_id = [], None, None
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
        elif name == "id":
            event_id = value
    if data:
        events.append(SSEEvent("\n".join(data), event, event_id))
    return events
