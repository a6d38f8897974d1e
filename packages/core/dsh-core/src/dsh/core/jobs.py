"""Background jobs (``ctx.jobs``): work owned by an agent that outlives a tool call.

A job has an id ``<kind>-N``, a status (``running``, ``stopping``, ``completed``,
``killed``, ``failed``), and settles once. When it settles its owner gets a
completion notice (a runtime message, not a user's words). An owner may have at
most :data:`MAX_RUNNING_PER_OWNER` running jobs; closing the owner kills its jobs.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import anyio

from dsh.core.signals import AbortSignal

if TYPE_CHECKING:
    from dsh.core.agent import Agent
    from dsh.core.context import Context

__all__ = [
    "MAX_RUNNING_PER_OWNER",
    "Job",
    "JobError",
    "JobOutcome",
    "JobRegistry",
    "JobStatus",
]

_log = logging.getLogger("dsh.core.jobs")

MAX_RUNNING_PER_OWNER = 10

JobStatus = Literal["running", "stopping", "completed", "killed", "failed"]


class JobError(Exception):
    """A job could not be started or found."""


@dataclass(slots=True)
class JobOutcome:
    """What a job function returns: its output, and whether it failed."""

    output: str = ""
    failed: bool = False
    diagnostic: str | None = None
    data: Any = None


JobFunction = Callable[[AbortSignal], Awaitable[JobOutcome]]


class Job:
    """One background job."""

    __slots__ = (
        "_done",
        "_scope",
        "description",
        "ended_at",
        "id",
        "kill_reason",
        "kind",
        "outcome",
        "owner_id",
        "signal",
        "started_at",
        "status",
    )

    def __init__(self, job_id: str, kind: str, owner_id: str, description: str) -> None:
        self.id = job_id
        self.kind = kind
        self.owner_id = owner_id
        self.description = description
        self.status: JobStatus = "running"
        self.outcome: JobOutcome | None = None
        self.kill_reason: str | None = None
        self.started_at = time.time()
        self.ended_at: float | None = None
        self.signal = AbortSignal()
        self._scope: anyio.CancelScope | None = None
        self._done = anyio.Event()

    @property
    def settled(self) -> bool:
        """True once the job reached a final status."""
        return self._done.is_set()

    async def wait(self, timeout: float | None = None) -> bool:
        """Wait until the job settles; returns False if ``timeout`` seconds passed first."""
        if timeout is None:
            await self._done.wait()
            return True
        with anyio.move_on_after(timeout):
            await self._done.wait()
        return self._done.is_set()

    def summary(self) -> dict[str, Any]:
        """A JSON-able description (what ``job_list`` shows)."""
        info: dict[str, Any] = {
            "job_id": self.id,
            "kind": self.kind,
            "status": self.status,
            "description": self.description,
            "elapsed_s": round((self.ended_at or time.time()) - self.started_at, 3),
        }
        if self.kill_reason is not None:
            info["kill_reason"] = self.kill_reason
        if self.outcome is not None and self.outcome.diagnostic:
            info["diagnostic"] = self.outcome.diagnostic
        return info


class JobRegistry:
    """Starts, tracks and kills jobs for one context."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx
        self._jobs: dict[str, Job] = {}
        self._counters: dict[str, itertools.count[int]] = {}

    def start(self, owner: Agent, kind: str, fn: JobFunction, *, description: str = "") -> Job:
        """Start ``fn(signal)`` as a job of ``owner``; raises :class:`JobError` at the cap."""
        if not kind or not kind.replace("_", "a").isalnum():
            raise JobError(f"invalid job kind {kind!r}: use letters, digits and '_'")
        running = sum(1 for j in self._jobs.values() if j.owner_id == owner.id and not j.settled)
        if running >= MAX_RUNNING_PER_OWNER:
            raise JobError(
                f"agent {owner.label or owner.id} already has {running} running jobs (the limit is"
                f" {MAX_RUNNING_PER_OWNER}); wait for one with job_output or stop one with job_kill"
            )
        counter = self._counters.setdefault(kind, itertools.count(1))
        job = Job(f"{kind}-{next(counter)}", kind, owner.id, description)
        self._jobs[job.id] = job
        self._ctx.spawn(self._run, job, fn)
        return job

    def get(self, job_id: str) -> Job | None:
        """The job with ``job_id``."""
        return self._jobs.get(job_id)

    def list(self, owner_id: str | None = None) -> list[Job]:
        """Jobs (of ``owner_id`` if given), oldest first."""
        return [j for j in self._jobs.values() if owner_id is None or j.owner_id == owner_id]

    def kill(self, job_id: str, reason: str = "killed") -> Job:
        """Ask a job to stop (status ``stopping`` until its task has ended)."""
        job = self._jobs.get(job_id)
        if job is None:
            raise JobError(f'no job "{job_id}"')
        if not job.settled and job.status == "running":
            job.status = "stopping"
            job.kill_reason = reason
            job.signal.abort(reason)
            if job._scope is not None:
                job._scope.cancel()
        return job

    def has_running(self, owner_id: str) -> bool:
        """True if ``owner_id`` has a job that has not settled."""
        return any(j.owner_id == owner_id and not j.settled for j in self._jobs.values())

    async def kill_owned(self, owner_id: str, reason: str = "owner closed") -> None:
        """Kill every running job of ``owner_id`` and wait until they have ended."""
        jobs = [j for j in self._jobs.values() if j.owner_id == owner_id and not j.settled]
        for job in jobs:
            self.kill(job.id, reason)
        with anyio.CancelScope(shield=True):
            for job in jobs:
                await job.wait()

    async def aclose(self) -> None:
        """Kill every job and wait for all of them."""
        for owner in {j.owner_id for j in self._jobs.values() if not j.settled}:
            await self.kill_owned(owner, "context closed")

    async def _run(self, job: Job, fn: JobFunction) -> None:
        outcome: JobOutcome | None = None
        try:
            with anyio.CancelScope() as scope:
                job._scope = scope
                if job.status == "stopping":
                    scope.cancel()
                try:
                    outcome = await fn(job.signal)
                except Exception as exc:
                    _log.debug("job %s failed", job.id, exc_info=True)
                    outcome = JobOutcome(failed=True, diagnostic=f"{type(exc).__name__}: {exc}")
        finally:
            job._scope = None
            job.ended_at = time.time()
            if job.status == "stopping" or outcome is None:
                job.status = "killed"
                job.outcome = outcome or JobOutcome(diagnostic=job.kill_reason or "cancelled")
            else:
                job.status = "failed" if outcome.failed else "completed"
                job.outcome = outcome
            job._done.set()
            self._notify_owner(job)

    def _notify_owner(self, job: Job) -> None:
        owner = self._ctx.agents.get(job.owner_id)
        if owner is None or owner.closed:
            return
        outcome = job.outcome or JobOutcome()
        lines = [f"[runtime notice] job {job.id} ({job.kind}) {job.status}."]
        if job.description:
            lines.append(f"Description: {job.description}")
        if outcome.output:
            lines.append(f"Output:\n{outcome.output}")
        if outcome.diagnostic:
            lines.append(f"Diagnostic: {outcome.diagnostic}")
        try:
            owner.notify("\n".join(lines), source={"job_id": job.id, "status": job.status})
        except Exception:
            _log.exception("could not notify owner of job %s", job.id)
