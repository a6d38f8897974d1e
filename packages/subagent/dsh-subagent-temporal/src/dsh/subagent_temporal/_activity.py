"""The activity: one attempt of a delegation, run on this worker host through an
ordinary dsh provider of the worker's preset.

The child is started under a stand-in parent agent (the real parent is in another
process, maybe on another host) that carries the delegation's depth and limit, so
the inner provider gates depth as it would locally. While it runs, a heartbeat
goes out every ``heartbeat_every`` seconds with the latest progress (see
:mod:`._live`): that keeps the attempt alive in Temporal's eyes and is how a cancel
reaches it. Every path disposes the inner run before the attempt reports anything,
so the child's process tree is gone first (the inner provider tears it down; if
this worker dies instead, its dsh watchdog does):

* the child ends (any stop reason) → the outcome (a large body by reference); under a
  budget (the spec's, less what earlier attempts reported: :mod:`._budget`) the child
  is started with it, and one stopped at a cap ends ``budget``;
* the workflow is cancelled → the child is disposed → an ``aborted`` outcome with
  its partial output and usage;
* the worker stops (drain grace over, or a second signal), or Temporal no longer
  knows the attempt → the child is disposed and the attempt fails with a retryable
  error: another worker runs the child again (the next attempt);
* the server has been out of reach for about ``heartbeat_timeout`` (its heartbeats
  cannot land, :mod:`._contact`) → the attempt is presumed lost: the child is disposed
  before the server, once back, can time the attempt out and start the next one, so
  two attempts of a delegation never run at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from dsh.core import AbortSignal, Agent, ConfigError, Context, ScriptedAdapter
from dsh.core import ScriptedReply as _Reply
from dsh.core.models import BoundModel
from dsh.subagent import (
    Budget,
    ProgressStream,
    SubagentError,
    SubagentResult,
    SubagentRun,
    SubagentRuntime,
    SubagentStartRequest,
    ToolFilter,
)
from dsh.subagent_temporal._budget import Earlier, attempt_budget
from dsh.subagent_temporal._contact import ServerContact, system_info_probe
from dsh.subagent_temporal._live import ProgressWindow
from dsh.subagent_temporal._spec import (
    ACTIVITY_NAME,
    WORKER_SHUTDOWN,
    DelegationOutcome,
    DelegationSpec,
    blob_key,
)
from dsh.subagent_temporal._store import ResultStore, StoreError, read_blob, write_blob
from dsh.subagent_temporal._tape import AttemptTape

__all__ = ["DelegationActivity", "WorkerStats"]

_log = logging.getLogger("dsh.subagent_temporal.worker")

_NO_MODEL = "this dsh worker's preset has no [agent.model]; configure one for in-process children"


@dataclass
class WorkerStats:
    """What a worker did (printed when it stops)."""

    attempts: int = 0
    running: int = 0
    ended: dict[str, int] = field(default_factory=dict)
    handed_back: int = 0
    """Attempts cut short by the worker stopping (another worker runs them again)."""

    def summary(self) -> str:
        """``ran N delegations (completed 3, error 1), handed back M``."""
        parts = ", ".join(f"{reason} {count}" for reason, count in sorted(self.ended.items()))
        text = f"ran {self.attempts} delegation attempt(s)"
        if parts:
            text += f" ({parts})"
        return text + f", handed back {self.handed_back}"


class DelegationActivity:
    """The activity of a worker whose context (preset) is ``ctx``."""

    def __init__(
        self,
        ctx: Context,
        *,
        identity: str,
        store: ResultStore | None = None,
        heartbeat_every: float = 1.0,
        stats: WorkerStats | None = None,
        stopping: asyncio.Event | None = None,
        tapes: str | None = None,
    ) -> None:
        self.ctx = ctx
        self.tapes = tapes
        """Where each delegation's tape is kept (``dsh worker --tapes``; None: no tapes)."""
        self.identity = identity
        self.store = store
        self.heartbeat_every = heartbeat_every
        self.stats = stats or WorkerStats()
        self.stopping = stopping or asyncio.Event()
        """Set to cut running attempts short now (the worker's second stop signal)."""
        self.contact = ServerContact()
        """Whether the server still answers (a lost attempt stops its child)."""
        try:
            self._model: BoundModel = ctx.default_model()
        except ConfigError:
            self._model = BoundModel(ScriptedAdapter([_Reply(error=_NO_MODEL)]))

    @activity.defn(name=ACTIVITY_NAME)
    async def run(self, spec: DelegationSpec) -> DelegationOutcome:
        """Run one attempt of the delegation (see the module docstring)."""
        info = activity.info()
        stats = self.stats
        stats.attempts += 1
        stats.running += 1
        try:
            outcome = await self._attempt(spec, info)
        except ApplicationError as exc:
            if exc.type == WORKER_SHUTDOWN:
                stats.handed_back += 1
            raise
        finally:
            stats.running -= 1
        stats.ended[outcome.stop_reason] = stats.ended.get(outcome.stop_reason, 0) + 1
        return outcome

    async def _attempt(self, spec: DelegationSpec, info: activity.Info) -> DelegationOutcome:
        earlier = Earlier.of(info.heartbeat_details) if info.attempt > 1 else Earlier()
        window = ProgressWindow(info.attempt, self.identity, earlier)
        budget: Budget | None = None
        if spec.budget is not None:
            # a retry: less what the attempts before it spent, and the time since the start
            elapsed = time.time() - info.scheduled_time.timestamp() if info.attempt > 1 else 0.0
            try:
                left = attempt_budget(Budget.from_json(spec.budget), earlier, elapsed)
            except (TypeError, ValueError) as exc:
                return self._refused(spec, window, f"the delegation's budget is malformed: {exc}")
            if isinstance(left, str):
                return self._spent(window, left)
            budget = left
        try:
            prompt = await self._prompt(spec)
        except StoreError as exc:
            return self._refused(spec, window, str(exc))
        tape = AttemptTape(self.ctx, self.tapes, spec.run_id) if self.tapes else None
        model, tool_tape = await tape.open() if tape is not None else (None, None)
        try:
            stand_in = self._stand_in(spec, model)
        except BaseException:
            if tape is not None:
                await tape.close()
            raise
        stand_in.tool_tape = tool_tape or stand_in.tool_tape
        signal = AbortSignal()
        try:
            request = SubagentStartRequest(
                prompt,
                stand_in,
                signal,
                label=spec.label,
                agent_options=spec.agent_options,
                output_schema=spec.output_schema,
                max_depth=spec.max_depth,
                tool_filter=_tool_filter(spec.tool_filter),
                persona=spec.persona,
                budget=budget,
            )
            try:
                with self.ctx.tracing.continue_from(spec.trace):
                    run = await SubagentRuntime.of(self.ctx).start(spec.provider, request)
            except SubagentError as exc:
                if exc.code == "DRAINING":
                    raise _handed_back("the worker is shutting down") from None
                return self._refused(spec, window, exc.message)
            try:
                return await self._supervise(spec, run, signal, window)
            finally:
                await _dispose(run)
        finally:
            await stand_in.aclose("delegation attempt over")
            if tape is not None:
                await tape.close()

    async def _supervise(
        self, spec: DelegationSpec, run: SubagentRun, signal: AbortSignal, window: ProgressWindow
    ) -> DelegationOutcome:
        window.child = run.local_agent.id if run.local_agent is not None else run.id
        if spec.budget is not None and run.local_agent is not None:
            window.meter = SubagentRuntime.of(self.ctx).budget_meter(run.local_agent)
        loop = asyncio.get_running_loop()
        stream = run.progress()  # subscribed now: nothing the child says from here is missed
        follow = loop.create_task(_follow(stream, window), name="follow the child's progress")
        beat = loop.create_task(self._heartbeat(spec, window), name="heartbeat")
        stopping = loop.create_task(self.stopping.wait(), name="worker stopping")
        settled = loop.create_task(_settled(run), name="the child's result")
        try:
            done, _ = await asyncio.wait(
                {settled, stopping, beat}, return_when=asyncio.FIRST_COMPLETED
            )
            if settled not in done and beat in done:
                why = _lost(beat)
                _log.warning("%s (run %s, attempt %d)", why, spec.run_id, window.attempt)
                signal.abort(why)
                await _dispose(run)
                raise _handed_back(why)
            if settled not in done:
                signal.abort("the dsh worker is stopping")
                await _dispose(run)
                raise _handed_back("the dsh worker stopped before the child finished")
            result = settled.result()
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            details = activity.cancellation_details()
            requested = details is not None and details.cancel_requested
            signal.abort(
                "the delegation was cancelled" if requested else "the attempt was called off"
            )
            await _dispose(run)
            if not requested:
                # worker shutdown, or Temporal no longer knows this attempt: not ours to end
                raise _handed_back(_why_called_off(details)) from None
            result = await _settled(run)
        finally:
            # the stream ends once the child settled and its items are read
            await asyncio.wait({follow}, timeout=0.5)
            for task in (stopping, settled, follow):
                task.cancel()
            await asyncio.wait({stopping, settled, follow}, timeout=1.0)
            beat.cancel()
            with contextlib.suppress(BaseException):
                await beat
        return await self._outcome(spec, result, window, run.local_agent)

    async def _heartbeat(self, spec: DelegationSpec, window: ProgressWindow) -> str:
        """Heartbeat until cancelled; return why the attempt is presumed lost when the
        server has not answered for ``heartbeat_timeout`` less one beat (see
        :mod:`._contact`: the server's own deadline cannot have passed yet)."""
        given = activity.info().heartbeat_timeout
        timeout = given.total_seconds() if given else spec.heartbeat_timeout
        # the first beat after one interval: a child that ends sooner costs no heartbeat
        interval = max(0.05, min(self.heartbeat_every, timeout / 3))
        limit = max(timeout - interval, 2 * interval)
        probe = None
        if self.contact.probe is None:
            with contextlib.suppress(RuntimeError):  # no client (an SDK test environment)
                probe = system_info_probe(activity.client())
        async with self.contact.watching(interval, probe) as watch:
            while True:
                await asyncio.sleep(interval)
                activity.heartbeat(window.details())
                silent = watch.silent_for()
                if silent >= limit:
                    error = self.contact.last_error
                    return (
                        f"the Temporal server has been unreachable for {silent:.1f} s"
                        f" ({error or 'no answer'}); with heartbeat_timeout {timeout:g} s this"
                        " attempt is lost: its child was stopped, and Temporal runs the next"
                        " attempt once the server is back"
                    )

    async def _prompt(self, spec: DelegationSpec) -> list[dict[str, Any]]:
        if spec.prompt_ref is None:
            return list(spec.prompt or [])
        if self.store is None:
            raise StoreError(
                f"the prompt ({spec.prompt_ref.size} bytes) was passed by reference, but this"
                " worker has no result store (dsh worker --result-store)"
            )
        blocks = json.loads(await read_blob(self.store, spec.prompt_ref))
        if not isinstance(blocks, list):
            raise StoreError("the stored prompt is not a list of content blocks")
        return blocks

    def _stand_in(self, spec: DelegationSpec, model: BoundModel | None = None) -> Agent:
        meta: dict[str, Any] = {
            "cwd": self.ctx.cwd,
            "origin": "temporal",
            "delegation_depth": max(spec.depth - 1, 0),
            "temporal_run": spec.run_id,
        }
        if spec.inherited_max_depth is not None:
            meta["max_depth"] = spec.inherited_max_depth
        if spec.parent_session:
            meta["remote_parent_session"] = spec.parent_session
        return self.ctx.agents.create(
            meta=meta, persist=False, model=model or self._model, label=f"temporal {spec.run_id}"
        )

    async def _outcome(
        self,
        spec: DelegationSpec,
        result: SubagentResult,
        window: ProgressWindow,
        child: Agent | None = None,
    ) -> DelegationOutcome:
        usage = result.usage
        if child is not None:
            # an in-process child's result counts its own turns only; what its own
            # delegations (the parent's grandchildren) spent is in this worker's ledger
            below = SubagentRuntime.of(self.ctx).usage(child)
            if below.runs:
                usage = usage + below.total
        total = window.earlier.plus(usage)
        outcome = DelegationOutcome(
            result.stop_reason,
            output=result.output,
            structured=result.structured,
            diagnostic=result.diagnostic,
            usage=total.to_json() if total is not None else None,
            attempt=window.attempt,
            worker=self.identity,
            progress=window.tail(),
        )
        body = json.dumps(
            {"output": result.output, "structured": result.structured},
            separators=(",", ":"),
            default=str,
        ).encode()
        if len(body) <= spec.inline_limit:
            return outcome
        if self.store is None:
            outcome.stop_reason = "error"
            outcome.output = result.output[: spec.inline_limit // 2]
            outcome.structured = None
            outcome.diagnostic = (
                f"temporal: the child's result is {len(body)} bytes, over the inline limit"
                f" ({spec.inline_limit}), and this worker has no result store to pass it by"
                " reference (dsh worker --result-store); its output was cut"
            )
            return outcome
        outcome.body_ref = await write_blob(
            self.store, blob_key(spec.run_id, f"result-{window.attempt}.json"), body
        )
        outcome.output, outcome.structured = "", None
        return outcome

    def _spent(self, window: ProgressWindow, diagnostic: str) -> DelegationOutcome:
        """The outcome of an attempt whose budget the attempts before it used up."""
        usage = window.earlier.usage
        return DelegationOutcome(
            "budget",
            diagnostic=diagnostic,
            usage=usage.to_json() if usage is not None else None,
            attempt=window.attempt,
            worker=self.identity,
        )

    def _refused(self, spec: DelegationSpec, window: ProgressWindow, why: str) -> DelegationOutcome:
        return DelegationOutcome(
            "error",
            diagnostic=f"temporal: {spec.provider} on worker {self.identity}: {why}",
            attempt=window.attempt,
            worker=self.identity,
        )


def _tool_filter(data: dict[str, Any] | None) -> ToolFilter | None:
    if data is None:
        return None
    allow = data.get("allow")
    return ToolFilter(
        allow=tuple(allow) if allow is not None else None, deny=tuple(data.get("deny") or ())
    )


async def _settled(run: SubagentRun) -> SubagentResult:
    return await run.result


async def _follow(stream: ProgressStream, window: ProgressWindow) -> None:
    async for item in stream:
        window.add(item)


async def _dispose(run: SubagentRun) -> None:
    """Dispose ``run`` and wait until it is quiescent, whatever cancels this task
    meanwhile (the attempt reports nothing before its child is gone)."""
    task = asyncio.ensure_future(run.dispose())
    current = asyncio.current_task()
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if current is not None:
                current.uncancel()
    with contextlib.suppress(Exception):
        task.result()


def _lost(beat: asyncio.Task[str]) -> str:
    """Why the heartbeat task ended (it only ends when the attempt is lost)."""
    if beat.cancelled():
        return "the heartbeat was cancelled"
    error = beat.exception()
    if error is not None:
        return f"the heartbeat failed ({type(error).__name__}: {error}): the attempt is lost"
    return beat.result()


def _handed_back(why: str) -> ApplicationError:
    return ApplicationError(why, type=WORKER_SHUTDOWN)


def _why_called_off(details: activity.ActivityCancellationDetails | None) -> str:
    if details is None:
        return "the attempt was cancelled"
    if details.worker_shutdown:
        return "the dsh worker stopped (its drain grace ran out) before the child finished"
    if details.not_found or details.timed_out:
        return "Temporal no longer knows this attempt (it timed out); it was stopped"
    if details.paused or details.reset:
        return "the activity was paused or reset"
    return "the attempt was cancelled"
