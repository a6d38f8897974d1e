"""Background jobs (``ctx.jobs``): work owned by an agent that outlives a tool call.

A job has an id ``<kind>-N``, a status (``running``, ``stopping``, ``completed``,
``killed``, ``failed``), and settles once. When it settles its owner gets exactly
one completion notice (a runtime message marked ``kind = "notice"``, not a user's
words), unless the owner is closing, the context is closing, or the owner itself
stopped the job with ``kill(..., notify=False)`` (``job_kill`` reports the final
state in its own result). An owner may have at most :data:`MAX_RUNNING_PER_OWNER`
running jobs; closing the owner kills its jobs and waits until they have ended.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import anyio

from dsh.core._content import Content
from dsh.core._errors import DshError
from dsh.core._signals import AbortSignal

__all__ = [
    "MAX_RUNNING_PER_OWNER",
    "Job",
    "JobError",
    "JobHost",
    "JobOutcome",
    "JobOwner",
    "JobRegistry",
    "JobStatus",
    "describe_job",
]

_log = logging.getLogger("dsh.core._jobs")

MAX_RUNNING_PER_OWNER = 10

JobStatus = Literal["running", "stopping", "completed", "killed", "failed"]


class JobError(DshError):
    """A job could not be started or found."""


@dataclass(slots=True)
class JobOutcome:
    """What a job function returns: its output, and whether it failed or was killed.

    ``killed`` reports work that was stopped from elsewhere (e.g. a child run that
    settled ``aborted``): the job settles ``killed`` rather than ``completed``.
    """

    output: str = ""
    failed: bool = False
    diagnostic: str | None = None
    data: Any = None
    killed: bool = False


JobFunction = Callable[[AbortSignal], Awaitable[JobOutcome]]


class JobOwner(Protocol):
    """What the registry needs of an agent that owns jobs (an :class:`~dsh.core.Agent`)."""

    @property
    def id(self) -> str:
        """The agent id."""

    @property
    def label(self) -> str | None:
        """How messages name the agent (else by id)."""

    @property
    def closed(self) -> bool:
        """True once the agent is closing: it may start no job and gets no notice."""

    def notify(self, content: Content, *, source: Mapping[str, Any] | None = None) -> None:
        """Deliver a runtime notice (a settled job's completion)."""


class JobOwners(Protocol):
    """Live owners by id (the context's agent registry)."""

    def get(self, agent_id: str) -> JobOwner | None:
        """The live owner with ``agent_id``, or None."""


class JobHost(Protocol):
    """What the registry needs of its context (a :class:`~dsh.core.Context`)."""

    @property
    def closing(self) -> bool:
        """True once the context is closing: no notice is delivered then."""

    @property
    def agents(self) -> JobOwners:
        """Where a settled job's owner is looked up."""

    def spawn(self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> asyncio.Task[Any]:
        """Run ``fn(*args)`` as a task the context owns."""


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
        "notify_owner",
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
        self.notify_owner = True
        """False once the owner stopped the job itself (no completion notice then)."""
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

    def __init__(self, ctx: JobHost) -> None:
        self._ctx = ctx
        self._jobs: dict[str, Job] = {}
        self._counters: dict[str, itertools.count[int]] = {}
        self._closing = False

    def check_capacity(self, owner: JobOwner) -> None:
        """Raise :class:`JobError` if ``owner`` may not start another job now
        (it is closed, the context is closing, or it is at the running-job cap)."""
        if self._closing:
            raise JobError("no new jobs: the context is closing")
        if owner.closed:
            raise JobError(f"agent {owner.label or owner.id} is closed and cannot start jobs")
        running = sum(1 for j in self._jobs.values() if j.owner_id == owner.id and not j.settled)
        if running >= MAX_RUNNING_PER_OWNER:
            raise JobError(
                f"agent {owner.label or owner.id} already has {running} running jobs (the limit is"
                f" {MAX_RUNNING_PER_OWNER}); wait for one with job_output or stop one with job_kill"
            )

    def start(self, owner: JobOwner, kind: str, fn: JobFunction, *, description: str = "") -> Job:
        """Start ``fn(signal)`` as a job of ``owner``; raises :class:`JobError` at the cap."""
        if not kind or not kind.replace("_", "a").isalnum():
            raise JobError(f"invalid job kind {kind!r}: use letters, digits and '_'")
        self.check_capacity(owner)
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

    def kill(self, job_id: str, reason: str = "killed", *, notify: bool = True) -> Job:
        """Ask a job to stop (status ``stopping`` until its task has ended; ``await
        job.wait()`` for that). ``notify=False``: the owner asked, so it gets no
        completion notice."""
        job = self._jobs.get(job_id)
        if job is None:
            raise JobError(f'no job "{job_id}"')
        if not job.settled and job.status == "running":
            job.status = "stopping"
            job.kill_reason = reason
            job.notify_owner = notify
            job.signal.abort(reason)
            if job._scope is not None:
                job._scope.cancel()
        return job

    def has_running(self, owner_id: str) -> bool:
        """True if ``owner_id`` has a job that has not settled."""
        jobs = self._jobs
        if not jobs:  # (no job ever: every agent's close asks, a child's on the hot path)
            return False
        return any(j.owner_id == owner_id and not j.settled for j in jobs.values())

    async def kill_owned(self, owner_id: str, reason: str = "owner closed") -> None:
        """Kill every running job of ``owner_id`` and wait until they have ended."""
        jobs = [j for j in self._jobs.values() if j.owner_id == owner_id and not j.settled]
        for job in jobs:
            self.kill(job.id, reason, notify=False)
        with anyio.CancelScope(shield=True):
            for job in jobs:
                await job.wait()

    async def aclose(self) -> None:
        """Refuse new jobs, kill every job and wait for all of them."""
        self._closing = True
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
            elif outcome.killed:
                job.status = "killed"
                job.outcome = outcome
            else:
                job.status = "failed" if outcome.failed else "completed"
                job.outcome = outcome
            job._done.set()
            self._notify_owner(job)

    def _notify_owner(self, job: Job) -> None:
        if not job.notify_owner or self._closing or self._ctx.closing:
            return
        owner = self._ctx.agents.get(job.owner_id)
        if owner is None or owner.closed:
            return
        try:
            owner.notify(
                describe_job(job, prefix="[runtime notice] "),
                source={"type": "job", "job_id": job.id, "status": job.status},
            )
        except Exception:
            _log.exception("could not notify owner of job %s", job.id)


def describe_job(job: Job, *, prefix: str = "") -> str:
    """What the owner reads about ``job``: status line, description, output, diagnostic."""
    elapsed = (job.ended_at or time.time()) - job.started_at
    if job.settled:
        lines = [f"{prefix}job {job.id} ({job.kind}) {job.status} after {elapsed:.1f}s."]
    else:
        lines = [f"{prefix}job {job.id} ({job.kind}) is {job.status} ({elapsed:.1f}s so far)."]
    if job.description:
        lines.append(f"Description: {job.description}")
    if job.kill_reason is not None and job.status in ("stopping", "killed"):
        lines.append(f"Stopped because: {job.kill_reason}")
    outcome = job.outcome
    if outcome is not None:
        if outcome.output:
            lines.append(f"Output:\n{outcome.output}")
        diagnostic = outcome.diagnostic
        if diagnostic and diagnostic not in outcome.output and diagnostic != job.kill_reason:
            lines.append(f"Diagnostic: {diagnostic}")
    return "\n".join(lines)
