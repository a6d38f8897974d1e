"""Task helpers of the remote-run lifecycle: outcomes, cancellations, bounded waits."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import anyio

__all__ = ["retrieve_outcome", "stray_cancellation", "wait_ignoring_cancellation"]

_log = logging.getLogger("dsh.subagent.remote")


def retrieve_outcome(task: asyncio.Task[Any]) -> None:
    """Mark a turn's outcome retrieved (a turn that failed after it was cancelled)."""
    if not task.cancelled():
        task.exception()


def stray_cancellation(error: BaseException) -> bool:
    """True for a CancelledError while nobody is cancelling this task: open()'s own
    (a future it awaited was cancelled), a failure of the start, not the caller's."""
    if not isinstance(error, asyncio.CancelledError):
        return False
    task = asyncio.current_task()
    return task is not None and task.cancelling() == 0


async def wait_ignoring_cancellation(task: asyncio.Task[None], timeout: float) -> None:
    """Wait up to ``timeout`` s for ``task``, through anyio scopes' and native
    cancellations alike (the caller re-raises its cancellation afterwards)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    with anyio.CancelScope(shield=True):
        while not task.done():
            remaining = deadline - loop.time()
            if remaining <= 0:
                _log.warning("closing a remote run took more than %g s after kill_now", timeout)
                return
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait({task}, timeout=remaining)
