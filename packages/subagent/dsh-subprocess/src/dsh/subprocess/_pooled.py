"""What a :class:`~dsh.subprocess.ProcessPool` is made of: its configuration
(:class:`PoolConfig`), the record of one process it holds (:class:`PooledProcess`,
which a transport subclasses), a start under way (:class:`Starting`), and the error
of a closed pool (:class:`PoolClosed`).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from dsh.subprocess._errors import ProcessStartError
from dsh.subprocess._process import ChildProcess

__all__ = ["PoolClosed", "PoolConfig", "PooledProcess", "Starting"]


class PoolConfig(BaseModel):
    """``pool = { size = 2, max_runs = 50, idle_timeout = 300 }`` on a provider row."""

    model_config = ConfigDict(extra="forbid")

    size: int = Field(0, ge=0, le=64)
    """Warm processes kept ready for the next runs; ``0`` (the default) turns the pool
    off: every run starts its own process."""
    max_runs: int = Field(50, ge=1)
    """Runs a process serves before it is recycled."""
    idle_timeout: float = Field(300.0, ge=0)
    """Seconds an unused process is kept before it is recycled (a fresh one replaces
    it); ``0`` = never."""

    @property
    def enabled(self) -> bool:
        """True when ``size`` > 0."""
        return self.size > 0


class PoolClosed(ProcessStartError):
    """The pool was closed (its owner is closing) before it could hand out a process."""


class PooledProcess:
    """One process a :class:`ProcessPool` holds: a child and what the transport keeps with
    it. Subclass it; override :meth:`aclose` to stop the connection before the process."""

    def __init__(self, child: ChildProcess) -> None:
        self.child = child
        self.runs = 0
        """Runs handed this process so far."""
        self.active = 0
        """Runs holding it now."""
        self.reserved = 0
        """Runs that claimed it while it started and have not taken it yet."""
        self.retired: str | None = None
        """Why no further run may take it (it is closed once the last one lets go)."""
        self.idle_since = time.monotonic()

    @property
    def pid(self) -> int:
        """The process id."""
        return self.child.pid

    @property
    def alive(self) -> bool:
        """False once the process has exited."""
        return self.child.returncode is None

    async def aclose(self, *, eof_grace: float, term_grace: float) -> None:
        """Stop the process (stdin EOF, ``eof_grace``, SIGTERM, ``term_grace``, SIGKILL)."""
        await self.child.terminate(eof_grace=eof_grace, term_grace=term_grace)

    def kill_now(self) -> None:
        """SIGKILL the process tree (synchronous last resort)."""
        self.child.kill_tree()

    def __repr__(self) -> str:
        state = f"retired: {self.retired}" if self.retired else f"{self.active} active"
        return f"<{type(self).__name__} pid {self.pid}, {self.runs} runs, {state}>"


class Starting:
    """A start under way; the start function calls :meth:`track` with its child as soon
    as it is spawned (the pool then counts it, and stops it if the start fails)."""

    __slots__ = ("child", "claims", "task")

    def __init__(self) -> None:
        self.child: ChildProcess | None = None
        self.claims = 0
        self.task: asyncio.Task[Any] | None = None

    def track(self, child: ChildProcess) -> None:
        """Record the process being started."""
        self.child = child
