"""Pieces that several providers' fault matrices share."""

from __future__ import annotations

from typing import Any, Protocol

from dsh.testing.faults import CellStep, until
from dsh.testing.model_servers import RecordedRequest

__all__ = ["FAST_GRACES", "until_asked"]

FAST_GRACES: dict[str, Any] = {"eof_grace": 0.3, "term_grace": 0.3, "cancel_grace": 0.5}
"""Small teardown graces (provider config fields): every fault-matrix cell must be gone
well within the 2 s process grace."""


class _RequestLog(Protocol):
    def matching(self, match: str) -> list[RecordedRequest]: ...


def until_asked(server: _RequestLog, marker: str, who: str) -> CellStep:
    """A cell step that waits until a request containing ``marker`` reached the fake
    model ``server`` and is still open (``who`` asked the model and waits)."""

    def asked() -> bool:
        return any(not r.client_disconnected for r in server.matching(marker))

    return until(asked, f"{who} asked the model")
