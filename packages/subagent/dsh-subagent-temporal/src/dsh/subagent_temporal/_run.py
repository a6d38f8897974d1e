"""One ``temporal`` run on the provider kit: put the delegation in a batch workflow
(or find it again), wait for its outcome, cancel it, follow its progress.

* ``open`` — hand the delegation to the provider's :class:`~._batch.Batcher` and wait
  until its workflow started (a lone delegation: a workflow whose id is the run id);
  reconnecting, find the workflow. A start aborted while its batch was still being
  gathered leaves nothing; one aborted while the start RPC was in flight waits for
  the answer, and ``close`` cancels what did get created.
* ``turn`` — wait for the outcome (the batch follows the workflow's history across
  server restarts), fetch a body stored by reference, emit the progress items the
  outcome carries. Under a budget (which travels in the spec: the worker enforces it
  on the child's tree, and a child stopped at a cap ends with stop reason ``budget``)
  the run also meters from this side: the kit's timer for the time cap, and the
  spend the heartbeats report (polled whether or not anyone listens) for the others.
* ``cancel`` — signal the workflow to cancel this delegation: the worker sees it at
  its next heartbeat and disposes the child; the outcome is then ``aborted``. The kit
  waits ``cancel_grace`` (heartbeat timeout + 1.5 s) for that. A cancel (or a
  ``turn_timeout``) that cannot reach the server is not a stop: the run settles
  ``error`` saying so, and the provider keeps delivering it in the background once
  the server answers (while this process runs); the workflow's turn deadline (set
  from ``turn_timeout``) stops the delegation even if this process is gone by then.
* ``close`` — a delegation whose end was not seen (its worker is gone, or the start
  was aborted) stays cancel-requested; once no delegation of its workflow is awaited
  any more (a lone one: at once), the workflow is terminated, so no retry starts a
  child again later. A run detached by its closing context is left running.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from typing import TYPE_CHECKING, Any

from dsh.subagent import (
    RunHandle,
    StartFailed,
    SubagentResult,
    SubagentStartRequest,
    SubagentUsage,
)
from dsh.subagent.kit import Lineage, RemoteRun
from dsh.subagent_temporal._spec import (
    BlobRef,
    DelegationOutcome,
    DelegationSpec,
    RetrySpec,
    blob_key,
    split_run_id,
)
from dsh.subagent_temporal._store import StoreError, read_blob, write_blob

if TYPE_CHECKING:
    from dsh.subagent_temporal._batch import Member, Pending
    from dsh.subagent_temporal._owner import RunOwner

__all__ = ["TemporalRun"]

_log = logging.getLogger("dsh.subagent_temporal")

_START_WAIT = 15.0
"""Seconds an aborted start still waits for the server's answer to its batch's start."""
_CANCEL_TRY = 5.0
"""Seconds a cancel tries to reach the server at most (less when ``cancel_grace`` is
shorter) before the run settles ``error``: the cancel was not delivered."""
_DEADLINE_MARGIN = 1.0
"""Seconds the workflow's turn deadline leaves after ``turn_timeout`` + ``cancel_grace``
(by then a parent that could reach the server has stopped the delegation itself)."""


class TemporalRun(RemoteRun):
    """One delegation of a batch workflow (see the module docstring)."""

    def __init__(
        self,
        owner: RunOwner,
        request: SubagentStartRequest,
        *,
        attach: str | None = None,
    ) -> None:
        super().__init__(owner.name, request, owner.config)
        self.owner = owner
        self.config = owner.config
        self.attach = attach
        self._id = attach or ""
        self._key = uuid.uuid4().hex
        """Names this run's blobs in the result store."""
        self.member: Member | None = None
        self._entry: Pending | None = None
        self.outcome: DelegationOutcome | None = None
        """The delegation's outcome, once seen."""
        self.finished = False
        """True once the delegation's end was seen (nothing left to stop)."""
        self.detached = False
        self._body: tuple[str, Any] | None = None
        self._prompt_ref: BlobRef | None = None
        self._closed = False
        self.undelivered: str | None = None
        """Why the run was stopped, when the stop could not be delivered to Temporal."""

    # -- hooks ------------------------------------------------------------------------

    def run_id(self) -> str:
        """The run id: the workflow id, or ``<workflow id>/<n>`` in a batch."""
        return self._id

    async def open(self) -> None:
        """Connect; queue the delegation and wait for its workflow (or find it)."""
        self.stages.enter("connect")
        try:
            await self.owner.client()
        except Exception as exc:
            raise StartFailed(
                f"{self.provider} connect failed: cannot reach Temporal at"
                f" {self.owner.target()}: {_reason(exc)}"
            ) from None
        if self.attach is not None:
            self.stages.enter("reconnect")
            workflow_id, activity_id = split_run_id(self.attach)
            batch = await self.owner.find_batch(workflow_id)
            self.member = batch.join(activity_id)
            return
        self.stages.enter("start")
        spec = await self._spec()
        size = len(json.dumps(spec, default=_plain, separators=(",", ":")))
        batcher = await self.owner.batcher()
        entry = self._entry = batcher.submit(spec, size)
        try:
            self.member = await asyncio.shield(entry.started)
        except asyncio.CancelledError:
            batcher.withdraw(entry)
            raise
        self._id = self.member.run_id
        journal = self.owner.journal(self.request.parent.ctx)
        if journal is not None:
            journal.started(
                self._id,
                parent_session=self.request.parent.id,
                label=self.request.label,
                provider=self.provider,
            )

    async def turn(self) -> SubagentResult:
        """Wait for the outcome and turn it into the result."""
        assert self.member is not None
        self.stages.enter("wait")
        if self.budget is not None:  # the parent-side meter: the spend the heartbeats report
            self.member.batch.meter(self.member, self.report_usage)
        outcome = await self.member.wait()
        self.outcome = outcome
        self.finished = True
        self.member.reader.feed(
            outcome.attempt, outcome.worker, outcome.progress, outcome.usage, self.member.emit
        )
        output, structured = await self._read_body(outcome)
        self._body = (output, structured)
        return SubagentResult(
            output,
            outcome.stop_reason,
            structured=structured,
            diagnostic=outcome.diagnostic,
            usage=self.usage(),
        )

    async def cancel(self) -> bool | None:
        """Signal the workflow to cancel this delegation (detached runs: nothing to ask).
        If the server cannot be reached, the run settles ``error`` (not ``aborted``: the
        child may still run) and the cancel is delivered later (see the module docstring)."""
        member = self.member
        if self.detached or member is None or self.finished:
            return None
        limit = self.config.turn_timeout
        timed_out = not self.stop.aborted and limit is not None
        reason = (
            f"turn_timeout = {limit:g} s ran out"
            if timed_out and limit is not None
            else self.stop.reason or "cancelled by the parent"
        )
        budget = min(_CANCEL_TRY, 0.8 * max(self.config.cancel_grace, 0.1))
        sent = await member.batch.cancel(member, reason, within=budget)
        if sent.status == "sent":
            return True
        if sent.status == "unreachable":
            self.undelivered = reason
            self.halt(self._undelivered(reason, sent.detail, timed_out))
        return False

    async def close(self) -> None:
        """Stop following; end what was not seen to end; drop blobs."""
        self._closed = True
        entry = self._entry
        if self.member is None and entry is not None:
            # the start was aborted while its batch's start RPC was in flight
            with contextlib.suppress(BaseException):
                self.member = await asyncio.wait_for(asyncio.shield(entry.started), _START_WAIT)
        member = self.member
        if member is not None:
            member.emit = None
            if not self.finished and not member.outcome.done() and not self.detached:
                await self._end_unseen(member)
            member.batch.leave(member)
        if self.finished or not self.published:
            await self._drop_blobs()

    async def _end_unseen(self, member: Member) -> None:
        """End a delegation whose end was not seen: terminate its workflow if nothing
        else of it is awaited, else (an aborted start) cancel it; what cannot reach
        the server now is delivered later by the provider."""
        batch = member.batch
        everything = batch.give_up(member)
        if self.undelivered is not None:
            why = f"the parent stopped the delegation ({self.undelivered}) while Temporal was down"
            self.owner.deliver_later(self.request.parent.ctx, member, why, terminate=everything)
            return
        why = (
            "the start was aborted"
            if not self.published
            else f"the parent stopped the delegation ({self.stop.reason or 'cancelled'})"
            " and no worker confirmed within cancel_grace"
        )
        if everything:
            sent = await batch.terminate(why)
        elif not self.published:
            sent = await batch.cancel(member, why)
        else:
            return
        if sent.status == "unreachable":
            self.owner.deliver_later(self.request.parent.ctx, member, why, terminate=everything)

    def _undelivered(self, reason: str, detail: str, timed_out: bool) -> str:
        what = reason if timed_out else f"the parent cancelled it ({reason})"
        text = (
            f"{self.provider} cancel failed: {what}, but the cancel could not be delivered:"
            f" the Temporal server at {self.owner.target()} is unreachable ({detail})."
            f" The delegation's workflow {split_run_id(self._id)[0]} may still run on the"
            " workers (a worker that lost the server runs it again once it is back);"
            " this process delivers the cancel once the server answers, while it runs"
        )
        deadline = self._deadline()
        if deadline is not None:
            text += f", and the workflow stops it itself {deadline:g} s after it started"
        return text + " (docs/providers/temporal.md: when the server is down)"

    def _deadline(self) -> float | None:
        """The workflow's turn deadline: ``turn_timeout`` + ``cancel_grace`` + a margin."""
        limit = self.config.turn_timeout
        if limit is None:
            return None
        return limit + self.config.cancel_grace + _DEADLINE_MARGIN

    def partial_output(self) -> str:
        """The outcome's output once seen."""
        return self._body[0] if self._body is not None else ""

    def usage(self) -> SubagentUsage:
        """The outcome's usage, else the last usage a heartbeat reported."""
        if self.outcome is not None and self.outcome.usage:
            return SubagentUsage.from_json(self.outcome.usage)
        if self.member is not None and self.member.reader.usage is not None:
            return self.member.reader.usage
        return SubagentUsage.unknown()

    def on_progress_wanted(self, handle: RunHandle) -> Any:
        """Follow the heartbeat details of this delegation's activity while someone listens."""
        member = self.member
        if self._closed or member is None:
            return None
        member.batch.want_progress(member, handle.emit)

        def stop() -> None:
            member.emit = None

        return stop

    # -- details ----------------------------------------------------------------------

    async def _spec(self) -> DelegationSpec:
        request, config = self.request, self.config
        lineage = Lineage.of_request(request)
        options = dict(config.agent_options or {})
        options.update(request.agent_options or {})
        tool_filter = request.tool_filter
        spec = DelegationSpec(
            provider=config.provider,
            label=request.label,
            agent_options=options or None,
            output_schema=dict(request.output_schema) if request.output_schema else None,
            max_depth=request.max_depth,
            tool_filter=(
                {
                    "allow": list(tool_filter.allow) if tool_filter.allow is not None else None,
                    "deny": list(tool_filter.deny),
                }
                if tool_filter is not None
                else None
            ),
            persona=request.persona,
            depth=lineage.depth,
            inherited_max_depth=lineage.max_depth,
            parent_session=lineage.parent_session,
            start_to_close_timeout=config.start_to_close_timeout,
            heartbeat_timeout=config.heartbeat_timeout,
            schedule_to_close_timeout=config.schedule_to_close_timeout,
            retry=RetrySpec(**config.retry.model_dump()),
            inline_limit=config.inline_limit,
            trace=request.parent.ctx.tracing.headers(),
            turn_deadline=self._deadline(),
            budget=lineage.budget.to_json() if lineage.budget is not None else None,
        )
        prompt = request.prompt_blocks
        data = json.dumps(prompt, separators=(",", ":")).encode()
        if len(data) <= config.inline_limit:
            spec.prompt = prompt
            return spec
        store = self.owner.store()
        if store is None:
            raise StartFailed(
                f"{self.provider} start failed: the prompt is {len(data)} bytes, over"
                f" inline_limit = {config.inline_limit}, and no result_store is configured"
                " to pass it by reference"
            )
        self.stages.enter("store prompt")
        self._prompt_ref = spec.prompt_ref = await write_blob(
            store, blob_key(self._key, "prompt.json"), data
        )
        return spec

    async def _read_body(self, outcome: DelegationOutcome) -> tuple[str, Any]:
        ref = outcome.body_ref
        if ref is None:
            return outcome.output, outcome.structured
        store = self.owner.store()
        if store is None:
            raise StoreError(
                f"the result ({ref.size} bytes) was stored by reference, but this provider"
                " has no result_store configured (set the one the workers use)"
            )
        self.stages.enter("fetch result")
        body = json.loads(await read_blob(store, ref))
        return str(body.get("output") or ""), body.get("structured")

    async def _drop_blobs(self) -> None:
        store = self.owner.store()
        if store is None:
            return
        keys = [ref.key for ref in (self._prompt_ref,) if ref is not None]
        if self.outcome is not None and self.outcome.body_ref is not None:
            keys.append(self.outcome.body_ref.key)
        for key in keys:
            try:
                await store.delete(key)
            except Exception as exc:
                _log.debug("%s: could not delete %s: %s", self.provider, key, exc)

    def detach(self) -> None:
        """Leave the workflow running and settle this run (the parent is going away)."""
        if self.finished or self.stop.aborted:
            return
        self.detached = True
        self.stop.abort(
            f"detached: the parent's context closed; the delegation keeps running on the"
            f" workers (reconnect with run id {self._id})"
        )

    def describe(self, error: BaseException) -> str:
        """Stage and reason; the SDK's errors read as their message."""
        return f"{self.provider} {self.stages.current} failed: {_reason(error)}"


def _plain(value: object) -> object:
    """JSON for the dataclasses of a spec (to measure its size)."""
    fields = getattr(value, "__dataclass_fields__", None)
    if fields is not None:
        return {name: getattr(value, name) for name in fields}
    return str(value)


def _reason(error: BaseException) -> str:
    message = getattr(error, "message", None) or str(error) or type(error).__name__
    return str(message)
