"""Pieces that several providers' fault matrices share."""

from __future__ import annotations

from typing import Any, Protocol

from dsh.testing.faults import CellStep, Fault, FaultCase, freeze_child, kill_child, until
from dsh.testing.model_servers import RecordedRequest

__all__ = ["FAST_GRACES", "child_process_case", "until_asked"]

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


def child_process_case(
    fault: Fault, provider: str, child: str, *, prompt: str, running: CellStep
) -> FaultCase | None:
    """The cells a provider whose child is one process builds alike (``child``: a
    piece of its command line), the child at work on ``prompt`` once ``running``
    returns: cancel mid-turn and double cancel end ``aborted``; a crash (SIGKILL)
    ends ``error`` ("killed by SIGKILL"); a child that ignores the cancel (SIGSTOP)
    ends ``aborted`` all the same. None for the other faults."""
    if fault in (Fault.CANCEL_MID_TURN, Fault.DOUBLE_CANCEL):
        return FaultCase(
            provider, "aborted", prompt=prompt, wait_until_running=running, settle_bound=3.0
        )
    if fault is Fault.CHILD_CRASH:
        return FaultCase(
            provider,
            "error",
            prompt=prompt,
            diagnostic="killed by SIGKILL",
            wait_until_running=running,
            induce=kill_child(child),
        )
    if fault is Fault.IGNORES_CANCEL:
        return FaultCase(
            provider,
            "aborted",
            prompt=prompt,
            diagnostic=f"fault matrix: {fault.value}",
            wait_until_running=running,
            induce=freeze_child(child),
            settle_bound=3.0,
        )
    return None
