"""``PooledRun``: a :class:`SubprocessRun` that may run on a warm process of its
provider's :class:`ProcessPool` (acp, codex), and gives it back when it is done."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from dsh.subagent import SubagentStartRequest
from dsh.subprocess._config import SubprocessConfig
from dsh.subprocess._pool import ProcessPool
from dsh.subprocess._pooled import PooledProcess
from dsh.subprocess._run import SubprocessRun

__all__ = ["PooledRun"]

P = TypeVar("P", bound=PooledProcess)


class PooledRun(SubprocessRun, Generic[P]):
    """A run whose process is its own or one taken from ``pool``.

    The subclass starts its own process and :meth:`take`\\ s it, or calls
    :meth:`start_on_pool`; it says how a process is tied to the run (:meth:`attach`,
    :meth:`detach`) and whether a process may serve again after a completed turn
    (:meth:`reusable`). :meth:`close` stops its own process, or gives a pooled one
    back: reused after a clean turn, recycled after a failed or aborted start or a
    stopped turn. Failures name only the stderr the process wrote while this run held
    it (:meth:`details`)."""

    def __init__(
        self,
        provider: str,
        request: SubagentStartRequest,
        config: SubprocessConfig,
        pool: ProcessPool[P] | None,
    ) -> None:
        super().__init__(provider, request, config)
        self.pool = pool
        """The provider's warm pool (None: the run starts a process of its own)."""
        self.process: P | None = None
        """The process this run holds (its own, or a pooled one)."""
        self._released = False
        self._tail_mark = 0

    # -- the subclass's hooks -----------------------------------------------------------

    def attach(self, process: P) -> None:
        """Tie ``process``'s messages to this run (after :meth:`take`)."""

    def detach(self, process: P) -> None:
        """Untie ``process`` from this run (before it is given back or stopped)."""

    async def reusable(self, process: P) -> bool:
        """Whether ``process`` may serve another run after this run's completed turn."""
        return False

    # -- the pool -------------------------------------------------------------------------

    def take(self, process: P) -> None:
        """Hold ``process`` for this run: it becomes the run's child, and only what it
        writes to stderr from now on goes into the run's diagnostics."""
        self.process, self.child = process, process.child
        self._released = False
        self._tail_mark = process.child.stderr_tail.position
        self.attach(process)

    async def start_on_pool(
        self, start: Callable[[], Awaitable[None]], *, died: Callable[[Exception], bool]
    ) -> None:
        """Take a warm process and ``start`` the run on it. When it fails and ``died``
        says the process died before it could serve (a race with its exit), give it
        back and take another, once."""
        pool = self.pool
        assert pool is not None
        for attempt in (1, 2):
            self.stages.enter("start")
            self.take(await pool.acquire())
            try:
                await start()
                return
            except Exception as exc:
                if attempt == 2 or not died(exc):
                    raise
            await self.give_back(reuse=False, reason="exited")

    async def give_back(self, *, reuse: bool, reason: str) -> None:
        """Hand the pooled process back (``reuse``: for another run; else recycled, for
        ``reason``)."""
        process, pool = self.process, self.pool
        assert process is not None
        assert pool is not None
        self.detach(process)
        self._released = True
        await pool.release(process, reuse=reuse, reason=reason)

    # -- the kit's hooks ------------------------------------------------------------------

    async def close(self) -> None:
        """Its own process: stop it. A pooled one: back to the pool after a completed
        turn if :meth:`reusable`, else recycled."""
        process = self.process
        if process is None:
            await super().close()  # (a spawn that never became a process of the transport)
            return
        if self.pool is None:
            self.detach(process)
            await process.aclose(
                eof_grace=self.config.eof_grace if self.published else 0.0,
                term_grace=self.config.term_grace,
            )
            return
        if self._released:
            return
        if not self.published:  # the start failed or was aborted midway
            reason = "cancelled" if self.stop.aborted else "error"
            await self.give_back(reuse=False, reason=reason)
        elif self.stopped:
            await self.give_back(reuse=False, reason="cancelled")
        else:
            await self.give_back(reuse=await self.reusable(process), reason="error")

    def kill_now(self) -> None:
        """SIGKILL the process tree: a pooled one only while this run holds it."""
        if self.pool is None or not self._released:
            super().kill_now()

    def details(self) -> str:
        """The stderr the process wrote while this run held it, if any."""
        if self.child is None:
            return ""
        tail = self.child.stderr_tail.text(1500, since=self._tail_mark)
        return f"{self.provider} stderr (last lines):\n{tail}" if tail else ""
