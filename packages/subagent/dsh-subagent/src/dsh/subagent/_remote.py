"""The provider kit: one lifecycle for every child that runs outside this process.

A transport subclasses :class:`RemoteRun` and writes only its wire protocol and
its output fold, in a few hooks:

* :meth:`RemoteRun.open` — start the child and handshake (spawn, ``initialize``,
  new session...). Raced against the request's signal and ``start_timeout``.
* :meth:`RemoteRun.turn` — send the task and return its result. Raced against
  the signal, :meth:`~dsh.subagent.SubagentRun.dispose` and ``turn_timeout``.
* :meth:`RemoteRun.cancel` — ask the child to stop its turn (``session/cancel``,
  ``turn/interrupt``, ``tasks/cancel``...); return whether the request went out.
  The kit then waits up to ``cancel_grace`` for :meth:`~RemoteRun.turn` to return: an
  ``aborted`` result it returns in time settles the run as it is (blanks filled: no
  diagnostic -> the stop's reason, no output -> :meth:`~RemoteRun.partial_output`,
  unknown usage -> :meth:`~RemoteRun.usage`); anything else (another stop reason, an
  exception, no return in time; no wait at all when the cancel was not sent) settles
  ``aborted`` with the stop's reason, :meth:`~RemoteRun.partial_output` and
  :meth:`~RemoteRun.usage`. After ``turn_timeout`` or :meth:`~RemoteRun.halt` the run
  settles ``error`` whatever the turn returns.
* :meth:`RemoteRun.close` — release everything (stop the process tree...).
  Bounded and idempotent; :meth:`RemoteRun.kill_now` is its synchronous last resort.

:meth:`RemoteRun.launch` owns the rest, the same way for every transport: the
start-aborted and start-failed errors (nothing is left running when ``start``
raises), publication, settling exactly once, the diagnostic stages, cancel that
does not wait for a cancel that could not be sent, teardown on every path (also
when the task driving it is cancelled twice), and the partial output and usage of
a run that did not finish::

    class EchoRun(RemoteRun):
        async def open(self) -> None:
            self.conn = await connect(...)
        async def turn(self) -> SubagentResult:
            return SubagentResult(await self.conn.ask(self.request.prompt_text), "completed")
        async def close(self) -> None:
            await self.conn.aclose()

    async def start(self, request):      # the provider
        return await EchoRun(self.name, request, self.config).launch()
"""

from __future__ import annotations

import abc
import asyncio
import itertools
import logging
import os
from dataclasses import replace
from typing import Any

import anyio

from dsh.subagent._diagnostics import redact_secrets
from dsh.subagent._errors import StartAborted, StartFailed, SubagentError
from dsh.subagent._progress import SubagentUsage
from dsh.subagent._remote_budget import ALL_CAPS, RemoteBudget, check_caps
from dsh.subagent._remote_config import RemoteTimeouts, Stages
from dsh.subagent._remote_tasks import (
    retrieve_outcome,
    stray_cancellation,
    wait_ignoring_cancellation,
)
from dsh.subagent._run import RunHandle, SubagentRun
from dsh.subagent._types import SubagentResult, SubagentStartRequest

__all__ = ["RemoteRun"]

_log = logging.getLogger("dsh.subagent.remote")

_run_numbers = itertools.count(1)

_TURN_EXIT_GRACE = 1.0
"""Seconds a cancelled turn task gets to end before the teardown goes on without it."""
_CLOSE_AFTER_KILL = 5.0
"""Seconds a cancelled caller still waits for :meth:`RemoteRun.close` after ``kill_now``."""


class RemoteRun(abc.ABC):
    """One run of a child outside this process (see the module docstring)."""

    budget_caps: frozenset[str] = ALL_CAPS
    """The budget caps the run enforces; any other is refused before anything starts."""

    def __init__(
        self, provider: str, request: SubagentStartRequest, timeouts: RemoteTimeouts
    ) -> None:
        self.provider = provider
        """The provider's name (used in diagnostics)."""
        self.request = request
        self.timeouts = timeouts
        self.stages = Stages(provider)
        self.handle: RunHandle | None = None
        """The provider side of the run, once published."""
        self.stop, self._unlink = request.signal.linked()
        """Fires when the request's signal does, or when the run is disposed."""
        self.published = False
        """True once the run was handed to the caller (a start that failed or was
        aborted closes without waiting for the child to wind down)."""
        self._halted: str | None = None
        self.stopped = False
        """True once the turn was stopped before it ended on its own (cancel, dispose,
        turn_timeout, :meth:`halt`): :meth:`close` may tear down without waiting."""
        self._driver: asyncio.Task[None] | None = None
        self._turn: asyncio.Task[SubagentResult] | None = None
        self._finishing: asyncio.Task[None] | None = None
        self._closing: asyncio.Task[None] | None = None
        self.budget: RemoteBudget | None = None
        """The run's budget, enforced from this side once published (:meth:`report_usage`)."""

    # -- hooks ------------------------------------------------------------------------

    @abc.abstractmethod
    async def open(self) -> None:
        """Start the child and handshake. Cancellation (abort, start timeout) arrives
        as a cancelled await; :meth:`close` runs afterwards on every failure."""

    @abc.abstractmethod
    async def turn(self) -> SubagentResult:
        """Send the task; return the result (raising is a failure of the run).

        Runs in a task of its own. Once the run is stopped (signal, dispose), an
        ``aborted`` result returned within ``cancel_grace`` of :meth:`cancel` is the
        run's result (see the module docstring); the task is cancelled after that."""

    async def cancel(self) -> bool | None:
        """Ask the child to stop its turn: True if the request was sent (the kit then
        waits ``cancel_grace`` for :meth:`turn` to return, and settles with the
        ``aborted`` result it returns, else ``aborted`` with :meth:`partial_output`),
        False if it could not be sent, None if there was nothing to ask (no turn under
        way yet). With False or None the kit stops the child at once."""
        return False

    @abc.abstractmethod
    async def close(self) -> None:
        """Release everything the run holds (idempotent, bounded in time)."""

    def kill_now(self) -> None:  # noqa: B027 - optional hook
        """Synchronous last resort when :meth:`close` was interrupted: kill what is left."""

    def run_id(self) -> str:
        """The run id (default: ``<provider>-<pid>-<n>``)."""
        return f"{self.provider}-{os.getpid()}-{next(_run_numbers)}"

    def partial_output(self) -> str:
        """What the child said so far (the output of a run that did not finish)."""
        return ""

    def usage(self) -> SubagentUsage:
        """What the run used so far (default: unknown)."""
        return SubagentUsage.unknown()

    def details(self) -> str:
        """Extra text for the diagnostic of a failed start or run, read after
        :meth:`close` (the child's last words: a stderr tail...). Default: none."""
        return ""

    def describe(self, error: BaseException) -> str:
        """The diagnostic of ``error`` (default: the stage and the error's message)."""
        return self.stages.describe(error)

    def on_progress_wanted(self, handle: RunHandle) -> Any:
        """Called once when someone first wants the run's progress; may return a
        disposer run at settlement. Default: nothing (check ``handle.wants_progress``)."""
        return None

    def report_usage(self, usage: SubagentUsage, turns: int | None = None) -> None:
        """The child's cumulative usage (and model calls) so far: a reached cap of the
        run's budget stops it, settling ``budget``. A no-op without a budget."""
        if self.budget is not None:
            self.budget.report(usage, turns)

    # -- the lifecycle -----------------------------------------------------------------

    async def launch(self) -> SubagentRun:
        """Open the child, publish the run and drive its turn in a context task.

        Raises :class:`~dsh.subagent.StartAborted` when the signal fires first,
        :class:`~dsh.subagent.StartFailed` when the child cannot start (or does not
        within ``start_timeout``), or the :class:`~dsh.subagent.SubagentError`
        :meth:`open` raised; nothing is left running then (:meth:`close` has
        finished, also when the caller was cancelled: it then gets its cancellation
        once :meth:`kill_now` and :meth:`close` are done).
        """
        try:
            return await self._launch()
        except BaseException:
            self._unlink()
            raise

    async def _launch(self) -> SubagentRun:
        signal = self.request.signal
        if signal.aborted:
            raise StartAborted(f"subagent start aborted: {signal.reason}")
        if self.request.budget is not None:
            check_caps(self.provider, self.request.budget, self.budget_caps)
        aborted = anyio.CancelScope()
        unlink = signal.on_abort(lambda _reason: aborted.cancel())
        timer = anyio.CancelScope(deadline=anyio.current_time() + self.timeouts.start_timeout)
        failure: BaseException | None = None
        try:
            with aborted, timer:
                await self.open()
        except BaseException as exc:
            failure = exc
        finally:
            unlink()
        if failure is None and not signal.aborted and not timer.cancelled_caught:
            return await self._publish()
        await self._close_shielded()
        if signal.aborted:
            raise StartAborted(f"subagent start aborted: {signal.reason}") from None
        if (
            failure is not None
            and not isinstance(failure, Exception)
            and not stray_cancellation(failure)
        ):
            raise failure  # the caller was cancelled (or the process is exiting)
        if timer.cancelled_caught or (failure is not None and timer.cancel_called):
            # (an open() that turned its cancellation into an error timed out all the same)
            message = (
                f"{self.provider} did not start within start_timeout ="
                f" {self.timeouts.start_timeout:g} s (stage: {self.stages.current})"
            )
        elif isinstance(failure, SubagentError):
            if failure.code != "START_FAILED":
                raise failure
            message = failure.message
        else:
            assert failure is not None
            message = self._describe(failure)
        raise StartFailed(self._with_details(message)) from failure

    async def _publish(self) -> SubagentRun:
        handle = RunHandle(
            self.run_id(),
            provider=self.provider,
            dispose=self._dispose,
            label=self.request.label,
            on_progress_wanted=self.on_progress_wanted,
        )
        try:
            driver = self.request.parent.ctx.spawn(self._drive)
        except BaseException:  # the context is not open (any more)
            await self._close_shielded()
            raise
        self.handle = handle
        self.published = True
        budget = self.request.budget
        if budget is not None:
            from dsh.subagent._runtime import SubagentRuntime  # (only budgeted runs pay)

            meters = SubagentRuntime.of(self.request.parent.ctx).meters
            self.budget = RemoteBudget(meters, self.request.parent.id, budget, self.stop.abort)
        self._driver = driver
        driver.add_done_callback(self._driver_done)
        return handle.run

    async def _drive(self) -> None:
        result: SubagentResult | None = None
        try:
            result = await self._produce()
        except Exception as exc:  # a hook (partial_output, usage...) failed
            _log.warning("%s: the run failed in the kit", self.provider, exc_info=True)
            result = self._failed(self._describe(exc))
        finally:
            if result is None:  # cancelled (the context is closing)
                result = self._aborted(self.stop.reason or "the run was cancelled")
            await self._finish(result)

    def _driver_done(self, driver: asyncio.Task[None]) -> None:
        """A driver cancelled before its first step never ran its own cleanup."""
        handle = self.handle
        if handle is None or handle.settled or self._finishing is not None:
            return
        self._finishing = driver.get_loop().create_task(
            self._finish(self._aborted(self.stop.reason or "the run was cancelled")),
            name=f"finish {self.provider} run",
        )

    async def _finish(self, result: SubagentResult) -> None:
        """Settle, close, and stop the turn task. A failure (error, max-tokens,
        refusal...) waits for the teardown: its diagnostic gets :meth:`details`, the
        child's last words, read after :meth:`close`; a completed or aborted run is the
        caller's at once."""
        handle = self.handle
        assert handle is not None
        if self.budget is not None:
            result = self.budget.settle(result)
        failure = result.stop_reason not in ("completed", "aborted", "budget")
        if not failure:
            handle.settle(result)
        try:
            await self._close_shielded()
            await self._stop_turn()
        finally:
            if failure and result.diagnostic is not None:
                result = replace(result, diagnostic=self._with_details(result.diagnostic))
            handle.settle(result)
            self._unlink()

    async def _produce(self) -> SubagentResult:
        stop = self.stop
        if stop.aborted:
            return self._aborted(stop.reason)
        self.stages.enter("turn")
        loop = asyncio.get_running_loop()
        turn = self._turn = loop.create_task(self.turn(), name=f"{self.provider} turn")
        turn.add_done_callback(retrieve_outcome)
        stopped = loop.create_task(stop.wait())
        limit = self.timeouts.turn_timeout
        try:
            done, _ = await asyncio.wait(
                {turn, stopped}, timeout=limit, return_when=asyncio.FIRST_COMPLETED
            )
            if turn in done:
                return self._turn_result(turn)
            timed_out = not stop.aborted
            self.stopped = True
            sent = await self._request_cancel()
            if sent and not turn.done():
                await asyncio.wait({turn}, timeout=self.timeouts.cancel_grace)
            if self._halted is not None:
                return self._failed(self._halted)
            if timed_out:
                assert limit is not None
                return self._failed(
                    f"{self.provider} turn failed: no answer within turn_timeout = {limit:g} s"
                    " (the child or its model server may be unresponsive; it was stopped)"
                )
            reason = stop.reason or "cancelled"
            confirmed = self._confirmed(turn, reason)
            if confirmed is not None:
                return confirmed
            if sent is False:
                reason += f" ({self.provider} could not be asked to cancel; it was stopped)"
            elif sent and not turn.done():
                reason += (
                    f" ({self.provider} did not confirm the cancel within"
                    f" {self.timeouts.cancel_grace:g} s and was stopped)"
                )
            return self._aborted(reason)
        finally:
            stopped.cancel()
            if not turn.done():
                turn.cancel()
            # bounded: a turn that swallows its cancellation (awaiting a reply the child
            # will never send) must not keep the teardown that would end it from running
            await asyncio.wait({turn, stopped}, timeout=_TURN_EXIT_GRACE)

    async def _stop_turn(self) -> None:
        """After :meth:`close`: a turn still running gets cancelled again, and a bounded
        wait (its child is gone, so whatever it awaited has ended)."""
        turn = self._turn
        if turn is None or turn.done():
            return
        turn.cancel()
        await asyncio.wait({turn}, timeout=_TURN_EXIT_GRACE)
        if not turn.done():
            _log.warning("%s: the turn task ignores cancellation; leaving it", self.provider)

    async def _request_cancel(self) -> bool | None:
        self.stages.enter("cancel")
        try:
            with anyio.fail_after(max(self.timeouts.cancel_grace, 0.1)):
                sent = await self.cancel()
        except Exception as exc:
            _log.debug("%s: cancel request failed: %s", self.provider, exc)
            return False
        return None if sent is None else bool(sent)

    def halt(self, diagnostic: str) -> None:
        """Stop the turn from inside: the transport saw something fatal (a request it
        cannot answer, a configuration the child rejected). The kit then cancels as for
        an abort (:meth:`cancel`, ``cancel_grace``) and the run settles ``error`` with
        ``diagnostic``. The first call wins."""
        if self._halted is None:
            self._halted = diagnostic
        self.stop.abort("halted")

    def _confirmed(self, turn: asyncio.Task[SubagentResult], reason: str) -> SubagentResult | None:
        """The ``aborted`` result a stopped turn returned by itself (within ``cancel_grace``),
        its blanks filled: no diagnostic -> ``reason``, no output -> :meth:`partial_output`,
        unknown usage -> :meth:`usage`. None if it returned nothing of the kind."""
        if not turn.done() or turn.cancelled() or turn.exception() is not None:
            return None
        result = turn.result()
        if not isinstance(result, SubagentResult) or result.stop_reason != "aborted":
            return None
        return replace(
            result,
            diagnostic=result.diagnostic or reason,
            output=result.output or self._partial_output(),
            usage=self._usage() if result.usage == SubagentUsage.unknown() else result.usage,
        )

    def _turn_result(self, turn: asyncio.Task[SubagentResult]) -> SubagentResult:
        if turn.cancelled():  # nobody cancelled it: it cancelled itself
            return self._failed(f"{self.provider} turn failed: the turn was cancelled from inside")
        try:
            result = turn.result()
        except SubagentError as exc:
            return self._failed(f"{self.provider} {self.stages.current} failed: {exc.message}")
        except Exception as exc:
            _log.debug("%s run failed", self.provider, exc_info=True)
            return self._failed(self._describe(exc))
        if not isinstance(result, SubagentResult):
            return self._failed(
                f"{self.provider} turn failed: the turn returned a {type(result).__name__},"
                " not a SubagentResult"
            )
        return result

    def _failed(self, diagnostic: str) -> SubagentResult:
        return SubagentResult.failed(
            redact_secrets(diagnostic), output=self._partial_output(), usage=self._usage()
        )

    def _aborted(self, reason: str | None) -> SubagentResult:
        return SubagentResult.aborted(
            reason or "cancelled", output=self._partial_output(), usage=self._usage()
        )

    def _partial_output(self) -> str:
        try:
            return self.partial_output()
        except Exception:
            _log.warning("%s: partial_output() failed", self.provider, exc_info=True)
            return ""

    def _usage(self) -> SubagentUsage:
        try:
            return self.usage()
        except Exception:
            _log.warning("%s: usage() failed", self.provider, exc_info=True)
            return SubagentUsage.unknown()

    def _describe(self, error: BaseException) -> str:
        try:
            return self.describe(error)
        except Exception:
            _log.warning("%s: describe() failed", self.provider, exc_info=True)
            return self.stages.describe(error)

    async def _dispose(self) -> None:
        self.stop.abort("run disposed")
        driver = self._driver
        if driver is not None and not driver.done():
            await asyncio.wait({driver})
        finishing = self._finishing
        if finishing is not None and not finishing.done():
            await asyncio.wait({finishing})
        if self.handle is not None and not self.handle.settled:
            await self._finish(self._aborted(self.stop.reason))
        closing = self._closing
        if closing is not None and not closing.done():
            # the driver was cancelled while closing: the run is quiescent only now
            await asyncio.wait({closing})

    async def _close_shielded(self) -> None:
        """Run :meth:`close` once, in a task of its own, and wait for it.

        A caller cancelled meanwhile (once, twice...) calls :meth:`kill_now` at once,
        still waits (at most ``_CLOSE_AFTER_KILL`` s more) for :meth:`close` to finish,
        then gets its cancellation: whoever awaited this knows the run is quiescent."""
        task = self._closing
        if task is None:
            task = self._closing = asyncio.get_running_loop().create_task(
                self._close_once(), name=f"close {self.provider} run"
            )
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.done():
                self._kill_now()
                await wait_ignoring_cancellation(task, _CLOSE_AFTER_KILL)
            raise

    async def _close_once(self) -> None:
        try:
            with anyio.CancelScope(shield=True):
                await self.close()
        except BaseException as exc:
            _log.warning(
                "%s: closing the run failed (%r); killing what is left", self.provider, exc
            )
            self._kill_now()
            if not isinstance(exc, Exception):
                raise

    def _kill_now(self) -> None:
        try:
            self.kill_now()
        except Exception:
            _log.warning("%s: kill_now() failed", self.provider, exc_info=True)

    def _with_details(self, message: str) -> str:
        try:
            extra = self.details()
        except Exception:
            _log.debug("%s: details() failed", self.provider, exc_info=True)
            extra = ""
        return f"{message}\n{extra}" if extra else message
