"""Background delegation (``run_in_background``, where the config enables it).

``background_mode = "one-shot"``: the run is a ``subagent`` job in ``ctx.jobs``.
It is started with its own abort signal, linked to the tool call's signal only
until the job id is returned; killing the job aborts it. The job maps the
result: ``completed`` → job completed with the output; ``aborted`` → killed;
anything else → failed, worded like a foreground failure. The run is disposed
on every path.

``background_mode = "continuable"``: a continuable child
(``SubagentRuntime.start_continuable``) that the model continues with
``send_message`` and that notifies on each settled turn.
"""

from __future__ import annotations

from dsh.core import AbortSignal, ToolContext, ToolResult, text_of
from dsh.core.jobs import JobError, JobOutcome
from dsh.subagent import SubagentError, SubagentResult, SubagentRun, SubagentRuntime
from dsh.tool_subagent._config import SubagentToolConfig
from dsh.tool_subagent._outcome import collect, tool_result_for
from dsh.tool_subagent._tool import DelegateArgs, run_foreground, start_request

__all__ = [
    "JOB_KIND",
    "job_outcome_for",
    "run_delegation",
    "start_background_job",
    "start_continuable_child",
]

JOB_KIND = "subagent"


async def run_delegation(
    runtime: SubagentRuntime, config: SubagentToolConfig, args: DelegateArgs, tctx: ToolContext
) -> ToolResult:
    """Run in the foreground unless the model asked for the background."""
    if not getattr(args, "run_in_background", False):
        return await run_foreground(runtime, config, args, tctx)
    if config.background_mode == "continuable":
        return await start_continuable_child(runtime, config, args, tctx)
    return await start_background_job(runtime, config, args, tctx)


async def start_background_job(
    runtime: SubagentRuntime, config: SubagentToolConfig, args: DelegateArgs, tctx: ToolContext
) -> ToolResult:
    """Start a one-shot run as a ``subagent`` job of the calling agent; return its id."""
    owner = tctx.agent
    jobs = owner.ctx.jobs
    try:
        jobs.check_capacity(owner)
    except JobError as exc:
        return ToolResult(f"subagent could not start: {exc}", is_error=True)
    signal = AbortSignal()
    unlink = tctx.signal.on_abort(signal.abort)  # until the job id is returned
    request = start_request(config, args, tctx)
    request.signal = signal
    try:
        run = await runtime.start(config.provider, request)
    except SubagentError as exc:
        return ToolResult(
            f"subagent could not start: {exc.message}", is_error=True, data={"code": exc.code}
        )
    finally:
        unlink()
    if signal.aborted:  # the tool call was cancelled while the run was starting
        await run.dispose()
        return ToolResult(f"subagent start aborted: {signal.reason}", is_error=True)

    async def collect(job_signal: AbortSignal) -> JobOutcome:
        stop = job_signal.on_abort(signal.abort)
        try:
            return await _collect(run)
        finally:
            stop()

    try:
        job = jobs.start(owner, JOB_KIND, collect, description=args.description)
    except JobError as exc:  # the cap filled while the run was starting
        await run.dispose()
        return ToolResult(f"subagent could not start: {exc}", is_error=True)
    return ToolResult(
        f"Started background job {job.id} (subagent run {run.id}). Keep working; you will"
        " get a runtime notice when it finishes. Read its result with job_output"
        f' {{"job_id": "{job.id}"}} (wait=true to block), or stop it with job_kill.',
        data={"job_id": job.id, "run_id": run.id},
    )


async def _collect(run: SubagentRun) -> JobOutcome:
    """Await the run and dispose it on every path; map the result to a job outcome."""
    done = await collect(run)
    return job_outcome_for(
        done.result, result_error=done.result_error, dispose_error=done.dispose_error, run_id=run.id
    )


def job_outcome_for(
    result: SubagentResult | None,
    *,
    result_error: BaseException | None = None,
    dispose_error: BaseException | None = None,
    run_id: str | None = None,
) -> JobOutcome:
    """The job outcome for a settled run: completed, killed (``aborted``) or failed,
    with the same wording as the foreground tool result."""
    tool_result = tool_result_for(
        result, result_error=result_error, dispose_error=dispose_error, run_id=run_id
    )
    text = text_of(tool_result.blocks())
    data = tool_result.data
    if not tool_result.is_error:
        return JobOutcome(output=text, data=data)
    diagnostic = result.diagnostic if result is not None else None
    if result is not None and result.stop_reason == "aborted" and dispose_error is None:
        return JobOutcome(output=text, diagnostic=diagnostic, data=data, killed=True)
    return JobOutcome(output=text, failed=True, diagnostic=diagnostic, data=data)


async def start_continuable_child(
    runtime: SubagentRuntime, config: SubagentToolConfig, args: DelegateArgs, tctx: ToolContext
) -> ToolResult:
    """Start a continuable child; returns once it accepted its first message."""
    try:
        child = await runtime.start_continuable(config.provider, start_request(config, args, tctx))
    except SubagentError as exc:
        return ToolResult(
            f"subagent could not start: {exc.message}", is_error=True, data={"code": exc.code}
        )
    return ToolResult(
        f"Started continuable subagent {child.id} in the background. You will get a runtime"
        " notice with its final output each time it finishes a turn. It keeps its"
        f' conversation: continue it with send_message {{"agent_id": "{child.id}"}}, stop its'
        " current turn with interrupt_agent, see its status with list_agents.",
        data={"agent_id": child.id, "status": child.status},
    )
