"""The delegation workflow: one activity per delegation of a batch.

A parent's delegations started together (a fan-out) share one workflow, up to the
provider's ``batch_max``; a larger fan-out is split over several workflows, so none
comes near Temporal's limits (2,000 pending activities, 50 MB / 50,000 events of
history, 2 MB per payload): a lone delegation is a batch of one, whose workflow id
is its run id. Sharing matters because creating a workflow costs the server about
five times what scheduling one more activity in an existing one does.

Deterministic and small on purpose: it schedules :data:`~._spec.ACTIVITY_NAME` for
every delegation with its timeouts and retry policy, and waits for all of them. Each
delegation's outcome is its activity's result, recorded in the history as the
activity completes (the parent follows the history, so it gets every child's
outcome as soon as that child ends); a body over the inline limit never passes
through here (the activity stores it and returns a reference).

Cancelling: the ``cancel`` signal cancels some delegations; cancelling the workflow
cancels all of them. Either way each activity is asked to cancel and waited for
(``WAIT_CANCELLATION_COMPLETED``): the worker disposes the child and the activity
completes with the child's ``aborted`` outcome (partial output, usage). Activities
that never completed (cancelled before a worker took them, or every attempt timed out
or failed) get an outcome in the workflow's result: the workflow itself never fails.

Turn deadlines: a delegation whose spec has a ``turn_deadline`` is cancelled by the
workflow itself that many seconds after the workflow started (a durable timer). The
parent stops a delegation at its ``turn_timeout`` on its own; this is the backstop for
when it could not (the server was unreachable at the time, or the parent is gone): the
timer fires once the server is back, before a retried attempt can finish the child.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, RetryState
from temporalio.exceptions import TimeoutError as TemporalTimeout

with workflow.unsafe.imports_passed_through():
    from dsh.subagent_temporal._spec import (
        ACTIVITY_NAME,
        CANCEL_SIGNAL,
        NON_RETRYABLE,
        WORKFLOW_NAME,
        BatchResult,
        CancelRequest,
        DelegationBatch,
        DelegationOutcome,
        DelegationSpec,
    )

__all__ = ["DelegationsWorkflow"]


@workflow.defn(name=WORKFLOW_NAME, sandboxed=False)
class DelegationsWorkflow:
    """Runs a batch of delegations (see the module docstring).

    Not sandboxed: the code is this class (no I/O, no clock, no randomness), and a
    sandbox costs every new workflow a re-import of its modules.
    """

    def __init__(self) -> None:
        self._handles: dict[str, workflow.ActivityHandle[DelegationOutcome]] = {}
        self._cancelled: dict[str, str] = {}

    @workflow.run
    async def run(self, batch: DelegationBatch) -> BatchResult:
        """Run every delegation's activity; return the outcomes that are not in the
        history as activity results."""
        for spec in batch.specs:
            handle = self._handles[spec.activity_id] = _start(spec)
            if spec.activity_id in self._cancelled:
                handle.cancel()
        handles = self._handles
        try:
            await self._wait(batch.specs)
        except asyncio.CancelledError:
            reason = workflow.cancellation_reason() or "the workflow was cancelled"
            for key, handle in handles.items():
                self._cancelled.setdefault(key, reason)
                handle.cancel()
            await workflow.wait_condition(lambda: all(h.done() for h in handles.values()))
        result = BatchResult()
        for spec in batch.specs:
            outcome = self._unusual(spec)
            if outcome is not None:
                result.outcomes[spec.activity_id] = outcome
        return result

    async def _wait(self, specs: list[DelegationSpec]) -> None:
        """Until every activity is done, cancelling each whose turn deadline passes."""
        handles = self._handles
        deadlines = {s.activity_id: s.turn_deadline for s in specs if s.turn_deadline}
        started = workflow.time()
        while not all(h.done() for h in handles.values()):
            waiting = {
                key: at
                for key, at in deadlines.items()
                if not handles[key].done() and key not in self._cancelled
            }
            if not waiting:
                await workflow.wait_condition(lambda: all(h.done() for h in handles.values()))
                return
            remaining = min(waiting.values()) - (workflow.time() - started)
            if remaining > 0.001:
                with contextlib.suppress(TimeoutError):
                    await workflow.wait_condition(
                        lambda: all(h.done() for h in handles.values()),
                        timeout=remaining,
                        timeout_summary="turn deadline",
                    )
                continue
            elapsed = workflow.time() - started
            for key, at in waiting.items():
                if at <= elapsed:
                    self._cancelled[key] = (
                        f"its turn deadline ({at:g} s: the parent's turn_timeout and"
                        " cancel_grace) passed, so the workflow stopped it itself"
                    )
                    handles[key].cancel()

    @workflow.signal(name=CANCEL_SIGNAL)
    def cancel(self, request: CancelRequest) -> None:
        """Cancel the named delegations (those not started yet, too)."""
        for key in request.activity_ids:
            self._cancelled.setdefault(key, request.reason)
            handle = self._handles.get(key)
            if handle is not None and not handle.done():
                handle.cancel()

    def _unusual(self, spec: DelegationSpec) -> DelegationOutcome | None:
        handle = self._handles[spec.activity_id]
        reason = self._cancelled.get(spec.activity_id)
        if handle.cancelled():
            return DelegationOutcome("aborted", diagnostic=_cancelled(reason, None))
        error = handle.exception()
        if error is None:
            return None  # completed: the outcome is the activity's result
        if reason is not None or (
            isinstance(error, ActivityError) and isinstance(error.cause, CancelledError)
        ):
            cause = error.cause if isinstance(error, ActivityError) else None
            return DelegationOutcome("aborted", diagnostic=_cancelled(reason, cause))
        if isinstance(error, ActivityError):
            return DelegationOutcome("error", diagnostic=_describe(error, spec))
        return DelegationOutcome("error", diagnostic=f"temporal: {error}")


def _start(spec: DelegationSpec) -> workflow.ActivityHandle[DelegationOutcome]:
    retry = spec.retry
    return workflow.start_activity(
        ACTIVITY_NAME,
        spec,
        result_type=DelegationOutcome,
        activity_id=spec.activity_id,
        start_to_close_timeout=timedelta(seconds=spec.start_to_close_timeout),
        heartbeat_timeout=timedelta(seconds=spec.heartbeat_timeout),
        schedule_to_close_timeout=(
            timedelta(seconds=spec.schedule_to_close_timeout)
            if spec.schedule_to_close_timeout
            else None
        ),
        retry_policy=RetryPolicy(
            initial_interval=timedelta(seconds=retry.initial_interval),
            backoff_coefficient=retry.backoff_coefficient,
            maximum_interval=timedelta(seconds=retry.maximum_interval),
            maximum_attempts=retry.maximum_attempts,
            non_retryable_error_types=[NON_RETRYABLE],
        ),
        cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        summary=spec.label,
    )


def _cancelled(reason: str | None, cause: BaseException | None) -> str:
    text = f"the delegation was cancelled: {reason}" if reason else "the delegation was cancelled"
    if isinstance(cause, TemporalTimeout):
        text += " (its worker stopped heartbeating before confirming)"
    return text


def _describe(error: ActivityError, spec: DelegationSpec) -> str:
    cause = error.cause
    attempts = spec.retry.maximum_attempts
    tries = f" after {attempts} attempt{'s' if attempts != 1 else ''}" if attempts else ""
    if isinstance(cause, TemporalTimeout):
        kind = cause.type.name.lower().replace("_", "-") if cause.type else "unknown"
        if kind == "heartbeat":
            return (
                f"temporal: no worker finished the child{tries}: each attempt's worker stopped"
                f" heartbeating for {spec.heartbeat_timeout:g} s (killed, stopped or cut off)"
            )
        return f"temporal: the child's activity hit its {kind} timeout{tries}"
    if isinstance(cause, ApplicationError):
        if error.retry_state == RetryState.MAXIMUM_ATTEMPTS_REACHED:
            return f"temporal: the child failed{tries}; last failure: {cause.message}"
        return f"temporal: {cause.message}"
    return f"temporal: the child's activity failed: {cause or error}"
