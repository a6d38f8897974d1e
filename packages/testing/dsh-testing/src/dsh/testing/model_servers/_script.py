"""Script items every fake server understands, and the stream faults.

A protocol item (``ChatReply``, ...) carries a :class:`StreamFaults` to break its
own stream; the items here replace the answer altogether.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["NO_FAULTS", "HTTPError", "Hang", "Reset", "StreamFaults"]


@dataclass(frozen=True, slots=True)
class HTTPError:
    """Script item: answer with an HTTP error ``status`` and a JSON body.

    With ``body`` None the server renders ``message`` in its API's error shape
    (:meth:`FakeServer.error_body`); ``headers`` adds e.g. ``retry-after``.
    """

    status: int
    message: str = "fake server error"
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Hang:
    """Script item: read the request, never answer (until the client leaves or the
    server closes)."""


@dataclass(frozen=True, slots=True)
class Reset:
    """Script item: reset the connection (TCP RST) instead of answering."""


@dataclass(frozen=True, slots=True)
class StreamFaults:
    """Faults applied while streaming events; positions count events already sent.

    For a non-streamed (JSON) answer, any set position applies before the body,
    ``malformed_after`` replaces the body with ``malformed_data``, and ``delay``
    waits once before answering.
    """

    delay: float = 0.0
    """Seconds to wait before each event (slow streaming)."""
    reset_after: int | None = None
    """Reset the connection (TCP RST) after this many events."""
    close_after: int | None = None
    """Close the connection cleanly after this many events, leaving the body unfinished."""
    hang_after: int | None = None
    """Stop sending after this many events and keep the connection open."""
    malformed_after: int | None = None
    """Send ``malformed_data`` after this many events, then carry on."""
    malformed_data: bytes = b"data: {this is not json\n\n"
    """The garbage sent by ``malformed_after``."""


NO_FAULTS = StreamFaults()
"""No faults: the stream is sent whole, as fast as possible."""
