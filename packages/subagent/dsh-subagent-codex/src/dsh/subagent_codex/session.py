"""One run of ``codex app-server``: handshake, publication, the turn, teardown.

Before publication (:meth:`CodexSession.open`): ``initialize`` → ``initialized`` →
``thread/start``. A failure there tears the process down and raises
``START_FAILED``; an abort raises ``ABORTED``. After publication a driver task
owned by the parent's context sends ``turn/start``, folds notifications until
``turn/completed`` (or a cancel, an unknown server request, a timeout, the
process exiting), interrupts the turn when it has to stop it early, tears the
process down, and only then settles the run — so a settled run has no process.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
from collections.abc import Mapping
from dataclasses import replace
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any, Literal

import anyio

from dsh.subagent import SubagentError, SubagentResult, SubagentRun, SubagentStartRequest
from dsh.subagent.out_of_process import ChildProcess, Stages, settle_from
from dsh.subagent_codex.config import CodexConfig
from dsh.subagent_codex.policy import decide
from dsh.subagent_codex.rpc import (
    AppServerConnection,
    ConnectionClosed,
    Notification,
    RpcError,
    ServerRequest,
    ServerRequestAnswer,
)
from dsh.subagent_codex.turn import TurnTracker

if TYPE_CHECKING:
    from dsh.core import Context

__all__ = ["INTERRUPT_GRACE", "CodexSession"]

_log = logging.getLogger("dsh.subagent_codex")

INTERRUPT_GRACE = 0.5
"""Seconds codex gets to end a turn after ``turn/interrupt`` (it takes 3–105 ms)."""
EOF_GRACE = 1.0
"""Seconds codex gets to exit after stdin EOF (it takes about 30 ms) before SIGTERM."""
TERM_GRACE = 1.0
"""Seconds after SIGTERM before SIGKILL."""

_OPT_OUT = ["account/rateLimits/updated", "remoteControl/status/changed", "thread/started"]
"""Notifications the provider never reads (codex then does not send them)."""

try:
    _VERSION = version("dsh-subagent-codex")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    _VERSION = "0"

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
"""Terminal colour codes (codex colours its log lines even into a pipe)."""

Halt = Literal["completed", "cancel", "fatal", "eof", "timeout"]


class _Halted(Exception):
    """The flow stopped waiting because the session halted (see ``CodexSession.halt``)."""


class CodexSession:
    """The process, connection and turn state of one codex run."""

    def __init__(
        self,
        config: CodexConfig,
        child: ChildProcess,
        request: SubagentStartRequest,
        cwd: str,
    ) -> None:
        self.config = config
        self.child = child
        self.request = request
        self.cwd = cwd
        self.stages = Stages(config.name, "initialize")
        self.ctx: Context = request.parent.ctx
        self.tracker: TurnTracker | None = None
        self.thread: Mapping[str, Any] = {}
        """``thread/start``'s result (model, model provider, sandbox...)."""
        self.server_requests: list[tuple[str, bool | None]] = []
        """``(method, approved)`` of every server request answered."""
        self.warnings: list[str] = []
        self.halt: Halt | None = None
        """Why the flow stopped (first cause wins)."""
        self.halt_detail = ""
        self._stop = anyio.Event()
        self._turn_done = anyio.Event()
        self._finished = anyio.Event()
        self._run: SubagentRun | None = None
        self._driver: asyncio.Task[Any] | None = None
        self.conn = AppServerConnection(
            child.stdin, child.stdout, on_notification=self._on_note, on_request=self._on_request
        )
        self._reader = self.ctx.spawn(self._read)
        self._unlink = request.signal.on_abort(lambda reason: self._halt("cancel", reason))

    # -- events from codex and the caller -------------------------------------------------

    def _halt(self, kind: Halt, detail: str = "") -> None:
        if self.halt is None:
            self.halt = kind
            self.halt_detail = detail
            self._stop.set()

    async def _read(self) -> None:
        try:
            await self.conn.read_loop()
        finally:
            self._halt("eof")
            self._turn_done.set()

    def _on_note(self, note: Notification) -> None:
        if note.method == "configWarning":
            summary = str(note.params.get("summary") or "")
            details = note.params.get("details")
            self.warnings.append((f"{summary}: {details}" if details else summary)[:500])
            if summary.startswith("Invalid configuration"):
                self._halt("fatal", f"codex rejected its configuration: {self.warnings[-1]}")
        tracker = self.tracker
        if tracker is not None and tracker.feed(note):
            self._turn_done.set()
            self._halt("completed")

    def _on_request(self, message: ServerRequest) -> ServerRequestAnswer:
        decision = decide(message.method, message.params, approve=self.config.permissions.approve)
        self.server_requests.append((message.method, decision.approved))
        if decision.approved is not None:
            _log.info(
                "codex %s: %s", message.method, "accepted" if decision.approved else "declined"
            )
        if decision.fatal is not None:
            self._halt("fatal", decision.fatal)
        return decision.answer

    # -- calls that give way to a halt -----------------------------------------------------

    async def _call(self, method: str, params: Mapping[str, Any], timeout: float) -> Any:
        outcome: list[tuple[bool, Any]] = []

        async def call(scope: anyio.CancelScope) -> None:
            try:
                outcome.append((True, await self.conn.request(method, params)))
            except Exception as exc:
                outcome.append((False, exc))
            scope.cancel()

        async def watch(scope: anyio.CancelScope) -> None:
            await self._stop.wait()
            scope.cancel()

        with anyio.move_on_after(timeout):
            async with anyio.create_task_group() as tg:
                tg.start_soon(call, tg.cancel_scope)
                tg.start_soon(watch, tg.cancel_scope)
        if outcome:
            ok, value = outcome[0]
            if ok:
                return value
            if isinstance(value, ConnectionClosed) and self.halt is not None:
                raise _Halted() from value
            raise value
        if self.halt is not None:
            raise _Halted()
        raise TimeoutError(f"codex did not answer {method} within {timeout:g} s")

    # -- before publication ------------------------------------------------------------------

    async def open(self) -> SubagentRun:
        """Handshake and publish the run; on failure tear down and raise."""
        config = self.config
        try:
            await self._call(
                "initialize",
                {
                    "clientInfo": {"name": "dsh", "title": "dsh subagent", "version": _VERSION},
                    "capabilities": {
                        "experimentalApi": False,
                        "requestAttestation": False,
                        "optOutNotificationMethods": _OPT_OUT,
                    },
                },
                config.startup_timeout,
            )
            await self.conn.notify("initialized")
            self.stages.enter("thread-start")
            settings = config.permissions
            params: dict[str, Any] = {
                "cwd": self.cwd,
                "ephemeral": True,
                "approvalPolicy": settings.approval_policy,
                "sandbox": settings.sandbox,
            }
            if config.model is not None:
                params["model"] = config.model
            if config.model_provider is not None:
                params["modelProvider"] = config.model_provider
            started = await self._call("thread/start", params, config.startup_timeout)
            thread = started.get("thread") if isinstance(started, Mapping) else None
            if not isinstance(thread, Mapping) or not isinstance(thread.get("id"), str):
                raise ValueError(f"thread/start answered without a thread id: {str(started)[:200]}")
            self.thread = started
            self.tracker = TurnTracker(thread["id"])
            if self.halt is not None:
                raise _Halted()
        except BaseException as exc:
            if self.halt == "eof" or isinstance(exc, ConnectionClosed):
                with anyio.CancelScope(shield=True), anyio.move_on_after(1.0):
                    await self.child.process.wait()  # for its exit status
            reason = self._start_failure(exc) if isinstance(exc, Exception) else None
            aborted = self.halt == "cancel"
            with anyio.CancelScope(shield=True):
                await self._teardown()
            if reason is None:
                raise
            if aborted:
                raise SubagentError(reason, "ABORTED") from exc
            raise SubagentError(self._with_stderr(reason), "START_FAILED") from exc
        run = SubagentRun(
            f"{config.name}-{thread['id']}",
            provider=config.name,
            dispose=self._dispose,
            label=self.request.label,
        )
        self._run = run
        self._driver = self.ctx.spawn(self._drive, run)
        return run

    def _start_failure(self, exc: Exception) -> str:
        """Why the start failed (decided before teardown, which ends the process)."""
        if self.halt == "cancel":
            return f"subagent start aborted: {self.halt_detail}"
        if self.halt == "fatal":
            reason = f"{self.config.name} {self.stages.current} failed: {self.halt_detail}"
        elif self.halt == "eof" or isinstance(exc, ConnectionClosed):
            reason = (
                f"{self.config.name} {self.stages.current} failed: codex app-server exited"
                f" ({self.child.exit_description()}) during the handshake"
            )
        else:
            reason = self._describe(exc)
        return reason

    def _describe(self, exc: BaseException) -> str:
        """``<provider> <stage> failed: <reason>``, codex's own errors in their words."""
        if isinstance(exc, RpcError | ConnectionClosed | TimeoutError):
            return f"{self.config.name} {self.stages.current} failed: {exc}"
        return self.stages.describe(exc)

    # -- after publication ---------------------------------------------------------------

    async def _drive(self, run: SubagentRun) -> None:
        try:
            await settle_from(
                run,
                self._produce,
                describe=lambda exc: self._with_stderr(self._describe(exc)),
                on_cancel=lambda: SubagentResult.aborted(
                    "codex run cancelled", output=self._partial()
                ),
            )
        finally:
            self._finished.set()

    async def _produce(self) -> SubagentResult:
        try:
            result = await self._turn()
        except BaseException:
            # the failure is reported with the stage it happened in; the teardown's own
            # trouble, if any, only goes to the log
            with anyio.CancelScope(shield=True):
                try:
                    await self._teardown()
                except Exception:
                    _log.exception("tearing codex down after a failed turn failed")
            raise
        self.stages.enter("teardown")
        with anyio.CancelScope(shield=True):
            ending = await self._teardown()
        if ending == "killed":
            _log.warning("codex app-server ignored stdin EOF and SIGTERM; it was killed")
        if result.stop_reason not in ("completed", "aborted") and result.diagnostic:
            # after teardown the stderr tail holds codex's last words
            result = replace(result, diagnostic=self._with_stderr(result.diagnostic))
        return result

    async def _turn(self) -> SubagentResult:
        tracker = self.tracker
        assert tracker is not None
        self.stages.enter("turn-start")
        if self.halt is None:
            text = self.request.prompt_text
            try:
                started = await self._call(
                    "turn/start",
                    {
                        "threadId": tracker.thread_id,
                        "input": [{"type": "text", "text": text, "text_elements": []}],
                    },
                    self.config.startup_timeout,
                )
                turn = started.get("turn") if isinstance(started, Mapping) else None
                if isinstance(turn, Mapping) and tracker.turn_id is None:
                    tracker.turn_id = str(turn.get("id"))
                self.stages.enter("turn")
            except _Halted:
                pass
        if self.halt is None:
            limit = self.config.turn_timeout
            with anyio.move_on_after(limit if limit is not None else math.inf):
                await self._stop.wait()
            if self.halt is None:
                self._halt("timeout", f"no answer within turn_timeout = {limit:g} s")
        return await self._outcome(tracker)

    async def _outcome(self, tracker: TurnTracker) -> SubagentResult:
        usage = tracker.usage
        if self.halt == "completed":
            return self._completed(tracker)
        if self.halt == "eof":
            with anyio.move_on_after(1.0):
                await self.child.process.wait()
            self.stages.enter("process")
            if self.child.returncode is None:  # alive, but its stdout is unusable
                what = f"codex app-server stopped answering ({self.conn.close_reason})"
            else:
                what = f"codex app-server exited ({self.child.exit_description()})"
            reason = f"{self.config.name} process failed: {what} before the turn completed"
            return SubagentResult.failed(reason, output=self._partial(), usage=usage)
        await self._interrupt(tracker)
        usage = tracker.usage
        if self.halt == "cancel":
            return SubagentResult(
                self._partial(), "aborted", diagnostic=self.halt_detail or "cancelled", usage=usage
            )
        if self.halt == "fatal":
            reason = f"{self.config.name} {self.stages.current} failed: {self.halt_detail}"
        else:  # timeout
            reason = (
                f"{self.config.name} turn failed: {self.halt_detail} (the model server may be"
                " unresponsive; the turn was interrupted)"
            )
        return SubagentResult.failed(reason, output=self._partial(), usage=usage)

    def _completed(self, tracker: TurnTracker) -> SubagentResult:
        name, usage, status = self.config.name, tracker.usage, tracker.status
        if status == "completed":
            answer = tracker.answer()
            if answer:
                return SubagentResult(answer, "completed", usage=usage)
            reason = f"{name} turn failed: the turn completed without a non-empty agent message"
            return SubagentResult.failed(reason, output=self._partial(), usage=usage)
        if status == "failed":
            reason = f"{name} turn failed: {tracker.error_text()}"
            info = (tracker.error or {}).get("codexErrorInfo")
            stop = "max-tokens" if info == "contextWindowExceeded" else "error"
            return SubagentResult(self._partial(), stop, diagnostic=reason, usage=usage)
        reason = f"{name} turn failed: codex ended the turn as {status!r} without being asked"
        return SubagentResult.failed(reason, output=self._partial(), usage=usage)

    async def _interrupt(self, tracker: TurnTracker) -> None:
        """``turn/interrupt`` and a short wait for ``turn/completed``."""
        if tracker.turn_id is None or tracker.done or self.conn.closed:
            return
        with anyio.move_on_after(INTERRUPT_GRACE):
            try:
                await self.conn.request(
                    "turn/interrupt", {"threadId": tracker.thread_id, "turnId": tracker.turn_id}
                )
            except Exception as exc:  # "no active turn", or codex went away
                _log.debug("turn/interrupt: %s", exc)
            await self._turn_done.wait()

    def _partial(self) -> str:
        return self.tracker.partial() if self.tracker is not None else ""

    # -- teardown ------------------------------------------------------------------

    async def _teardown(self) -> str:
        self._unlink()
        ending = await self.child.terminate(eof_grace=EOF_GRACE, term_grace=TERM_GRACE)
        if not self._reader.done():
            await asyncio.wait({self._reader}, timeout=1.0)
        return ending

    async def _dispose(self) -> None:
        if not self._finished.is_set():
            self._halt("cancel", "run disposed")
        driver = self._driver
        if driver is not None:
            await asyncio.wait({driver})
        if not self._finished.is_set():  # the driver was cancelled before it ran
            await self._teardown()
            if self._run is not None:
                self._run.settle(SubagentResult.aborted("run disposed", output=self._partial()))

    def _with_stderr(self, reason: str) -> str:
        parts = [reason]
        if self.warnings:
            parts.append("codex warnings: " + "; ".join(self.warnings[-3:]))
        if self.conn.noise:
            parts.append("codex printed non-protocol output: " + " | ".join(self.conn.noise[-2:]))
        tail = _ANSI.sub("", self.child.stderr_tail.text(1500))
        if tail:
            parts.append(f"codex stderr (last lines):\n{tail}")
        return "\n".join(parts)
