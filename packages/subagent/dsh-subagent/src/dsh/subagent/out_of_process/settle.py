"""Never-raising settlement of a run from the coroutine that drives its child."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio

from dsh.subagent.errors import SubagentError
from dsh.subagent.run import SubagentRun
from dsh.subagent.types import SubagentResult

__all__ = ["Stages", "settle_from"]

_log = logging.getLogger("dsh.subagent.out_of_process")


class Stages:
    """Tracks which stage a run is in, so a failure's diagnostic can name it.

    ``stages.enter("initialize")`` ... a failure then reads
    ``codex initialize failed: <reason>``.
    """

    __slots__ = ("current", "provider")

    def __init__(self, provider: str, first: str = "start") -> None:
        self.provider = provider
        self.current = first

    def enter(self, stage: str) -> None:
        """Mark the start of ``stage``."""
        self.current = stage

    def describe(self, error: BaseException) -> str:
        """A diagnostic for ``error`` naming the current stage."""
        reason = error.message if isinstance(error, SubagentError) else str(error)
        if not reason:
            reason = type(error).__name__
        elif not isinstance(error, (SubagentError, OSError)):
            reason = f"{type(error).__name__}: {reason}"
        return f"{self.provider} {self.current} failed: {reason}"


async def settle_from(
    run: SubagentRun,
    produce: Callable[[], Awaitable[SubagentResult]],
    *,
    describe: Callable[[BaseException], str] | None = None,
    on_cancel: Callable[[], SubagentResult] | None = None,
) -> None:
    """Await ``produce()`` and settle ``run`` with its result, whatever happens.

    An exception becomes an ``error`` result (diagnostic from ``describe``);
    cancellation becomes ``on_cancel()`` (default: ``aborted``) and is re-raised.
    Never raises anything but cancellation.
    """
    try:
        result = await produce()
    except anyio.get_cancelled_exc_class():
        run.settle(on_cancel() if on_cancel is not None else SubagentResult.aborted("cancelled"))
        raise
    except Exception as exc:
        _log.debug("run %s failed", run.id, exc_info=True)
        text = describe(exc) if describe is not None else f"{type(exc).__name__}: {exc}"
        run.settle(SubagentResult.failed(text))
    else:
        run.settle(result)
