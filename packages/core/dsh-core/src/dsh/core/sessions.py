"""Sessions beyond the front door: the events of a session log, its header, a loaded
session with its torn tail, session ids and the error a refused write raises.

:mod:`dsh.core` itself exports ``Session`` and ``SessionStore``.
"""

from dsh.core._jsonl import SessionError
from dsh.core._session import (
    Event,
    LoadedSession,
    SessionHeader,
    TornTail,
    new_session_id,
)

__all__ = [
    "Event",
    "LoadedSession",
    "SessionError",
    "SessionHeader",
    "TornTail",
    "new_session_id",
]
