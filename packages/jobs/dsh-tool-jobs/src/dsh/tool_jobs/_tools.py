"""``job_output``, ``job_list`` and ``job_kill``: the model's handle on its background jobs.

An agent sees and stops only its own jobs; any other id (someone else's, or
none at all) is refused with the same error, naming the id and listing the
caller's own jobs.
"""

from __future__ import annotations

from typing import Any

import anyio
from pydantic import BaseModel, ConfigDict, Field

from dsh.core import AbortSignal, Agent, DshError, Tool, ToolContext, ToolResult
from dsh.core.jobs import Job, describe_job

__all__ = [
    "DEFAULT_TIMEOUT_MS",
    "JobAccessError",
    "JobKillArgs",
    "JobListArgs",
    "JobOutputArgs",
    "job_kill_tool",
    "job_list_tool",
    "job_output_tool",
    "owned_job",
    "wait_for_job",
]

DEFAULT_TIMEOUT_MS = 30_000
MAX_TIMEOUT_MS = 600_000


class JobAccessError(DshError, LookupError):
    """The job id is not one of the calling agent's jobs (a :class:`~dsh.core.DshError`;
    still a ``LookupError`` for callers that catch that)."""


class JobOutputArgs(BaseModel):
    """Arguments of ``job_output``."""

    model_config = ConfigDict(extra="forbid")

    job_id: str = Field(..., min_length=1, description="The job id, e.g. subagent-1.")
    wait: bool = Field(
        False, description="Wait until the job finishes (at most timeout_ms) before answering."
    )
    timeout_ms: int = Field(
        DEFAULT_TIMEOUT_MS,
        ge=0,
        le=MAX_TIMEOUT_MS,
        description="How long to wait when wait is true, in milliseconds.",
    )


class JobListArgs(BaseModel):
    """``job_list`` takes no arguments."""

    model_config = ConfigDict(extra="forbid")


class JobKillArgs(BaseModel):
    """Arguments of ``job_kill``."""

    model_config = ConfigDict(extra="forbid")

    job_id: str = Field(..., min_length=1, description="The job id, e.g. subagent-1.")
    reason: str = Field(
        "stopped by its owner", max_length=500, description="Why it is stopped (kept with it)."
    )


def owned_job(agent: Agent, job_id: str) -> Job:
    """The job ``job_id`` if ``agent`` owns it; else :class:`JobAccessError`."""
    job = agent.ctx.jobs.get(job_id)
    if job is None or job.owner_id != agent.id:
        mine = ", ".join(j.id for j in agent.ctx.jobs.list(agent.id)) or "none"
        raise JobAccessError(
            f'job "{job_id}" is not one of your jobs (yours: {mine}); an agent can only see'
            " and stop its own jobs"
        )
    return job


async def wait_for_job(job: Job, timeout: float, signal: AbortSignal) -> bool:
    """Wait until ``job`` settles, ``timeout`` seconds pass or ``signal`` fires;
    True if it settled."""
    if job.settled:
        return True
    with anyio.move_on_after(timeout) as scope:
        unlink = signal.on_abort(lambda _reason: scope.cancel())
        try:
            await job.wait()
        finally:
            unlink()
    return job.settled


def _data(job: Job) -> dict[str, Any]:
    data = job.summary()
    if job.outcome is not None:
        data["output"] = job.outcome.output
        if job.outcome.data is not None:
            data["data"] = job.outcome.data
    return data


async def job_output(args: JobOutputArgs, tctx: ToolContext) -> ToolResult:
    """Status of one of the caller's jobs and, once it has settled, its outcome."""
    try:
        job = owned_job(tctx.agent, args.job_id)
    except JobAccessError as exc:
        return ToolResult(str(exc), is_error=True)
    if args.wait:
        await wait_for_job(job, args.timeout_ms / 1000, tctx.signal)
    text = describe_job(job)
    if not job.settled:
        if tctx.signal.aborted:
            text += f"\nStopped waiting: {tctx.signal.reason}."
        elif args.wait:
            text += (
                f"\nStill running after waiting {args.timeout_ms} ms. Wait again, keep"
                " working (a notice comes when it finishes), or stop it with job_kill."
            )
        else:
            text += (
                "\nCall job_output with wait=true to wait for it, or job_kill to stop it."
                " A notice comes when it finishes."
            )
    return ToolResult(text, data=_data(job))


async def job_list(args: JobListArgs, tctx: ToolContext) -> ToolResult:
    """The caller's jobs, oldest first."""
    jobs = tctx.agent.ctx.jobs.list(tctx.agent.id)
    if not jobs:
        return ToolResult("You have no jobs.", data={"jobs": []})
    lines = []
    for job in jobs:
        line = f"{job.id} ({job.kind}) {job.status}"
        if job.description:
            line += f": {job.description}"
        lines.append(line)
    return ToolResult("\n".join(lines), data={"jobs": [j.summary() for j in jobs]})


async def job_kill(args: JobKillArgs, tctx: ToolContext) -> ToolResult:
    """Stop one of the caller's jobs and wait until it has ended (nothing left running).

    The job's final state is this result: no completion notice follows.
    """
    try:
        job = owned_job(tctx.agent, args.job_id)
    except JobAccessError as exc:
        return ToolResult(str(exc), is_error=True)
    if job.settled:
        return ToolResult(
            f"job {job.id} had already {job.status}; nothing to stop.\n{describe_job(job)}",
            data=_data(job),
        )
    tctx.agent.ctx.jobs.kill(job.id, args.reason, notify=False)
    with anyio.CancelScope(shield=True):  # the kill is issued: see it through
        await job.wait()
    return ToolResult(describe_job(job), data=_data(job))


job_output_tool = Tool.from_model(
    "job_output",
    "Read the status of one of your background jobs and, once it has finished, its result."
    " Set wait to block until it finishes (at most timeout_ms).",
    JobOutputArgs,
    job_output,
)
job_list_tool = Tool.from_model(
    "job_list", "List your background jobs with their status.", JobListArgs, job_list
)
job_kill_tool = Tool.from_model(
    "job_kill",
    "Stop one of your background jobs and wait until it has ended. Its final state is"
    " returned here; no notice follows.",
    JobKillArgs,
    job_kill,
)
