"""One run of ``codex app-server`` on the provider kit (:class:`~dsh.subprocess.PooledRun`).

``open``: spawn, ``initialize`` → ``initialized`` → ``thread/start``. ``turn``:
``turn/start``, then the notifications are folded until ``turn/completed``.
``cancel``: ``turn/interrupt``. The kit does the rest (start timeout, abort,
publication, ``turn_timeout``, teardown, settling once). Every request is raced
against codex going away and against a fatal answer (an unknown server request,
a rejected configuration), so a dead or misbehaving codex fails the run at once.

With a warm pool the run takes a handshaken app-server instead of starting one
and opens its own ephemeral thread on it (the run's cwd; the run's depth
variables in the thread's ``config`` as ``shell_environment_policy.set``, so
commands codex runs for it get them); after a completed turn the thread is
unsubscribed and the app-server goes back to the pool, else it is recycled.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Awaitable, Mapping
from typing import Any

import anyio

from dsh.core import DshError
from dsh.subagent import (
    InvalidRequest,
    StartFailed,
    SubagentResult,
    SubagentStartRequest,
    SubagentUsage,
)
from dsh.subagent_codex._appserver import (
    INSTALL_HINT,
    CodexAppServer,
    base_extra_env,
    describe_warning,
    invalid_configuration,
)
from dsh.subagent_codex._config import CodexConfig
from dsh.subagent_codex._policy import decide
from dsh.subagent_codex._rpc import (
    ConnectionClosed,
    Notification,
    RpcError,
    ServerRequest,
    ServerRequestAnswer,
)
from dsh.subagent_codex._tape import codex_argv
from dsh.subagent_codex._turn import TurnTracker
from dsh.subprocess import PooledRun, ProcessPool

__all__ = ["CodexFailure", "CodexRun"]

_log = logging.getLogger("dsh.subagent_codex")

_UNSUBSCRIBE_BOUND = 2.0
"""Seconds a pooled app-server gets to unload a finished thread before it is recycled."""


class CodexFailure(DshError):
    """Why the run cannot go on (codex went away, a fatal request, a rejected config)."""


class CodexRun(PooledRun[CodexAppServer]):
    """The connection and turn state of one codex run (see the module docstring)."""

    config: CodexConfig
    budget_caps = frozenset(("tokens", "seconds"))
    """Enforced from this side: codex reports its thread's tokens as it goes
    (``thread/tokenUsage/updated``), not its cost, model calls or delegations."""

    def __init__(
        self,
        config: CodexConfig,
        request: SubagentStartRequest,
        pool: ProcessPool[CodexAppServer] | None = None,
    ) -> None:
        super().__init__(config.name, request, config, pool)
        self.tracker: TurnTracker | None = None
        self.warnings: list[str] = []
        self.fatal: str | None = None
        """Why the run must stop, when codex asked something it cannot be answered."""
        self._wake = asyncio.Event()
        """Set when the turn completed, ``fatal`` was set, or codex's stdout ended."""
        self._turn_done = asyncio.Event()
        """Set when the turn completed or codex's stdout ended."""
        self._thread_key: str | None = None
        self._thread_params: dict[str, Any] = {}

    # -- the kit's hooks ---------------------------------------------------------------

    async def open(self) -> None:
        if not self.request.prompt_text.strip():
            raise InvalidRequest(
                f"{self.provider} provider: the prompt has no text (codex takes text prompts only)"
            )
        env = self.child_env(self.extra_env(), lineage=False)
        if self.pool is not None and not self.usable_pool(self.pool, env):
            self.pool = None  # another environment (a trace context...) or sandbox: its own
        if self.pool is None:
            await self._start_own()
            await self._start_thread()
            return
        await self.start_on_pool(self._start_thread, died=self._died)

    def _died(self, error: Exception) -> bool:
        """The warm app-server died before it could serve (a race with its exit)."""
        server = self.server
        return (
            isinstance(error, CodexFailure)
            and self.fatal is None
            and server is not None
            and not server.healthy
        )

    async def _start_thread(self) -> None:
        self.stages.enter("thread-start")
        settings = self.config.permissions
        sandbox = self.config.sandbox_settings(self.policy, self.cwd)
        params: dict[str, Any] = {
            "cwd": self.cwd,
            "ephemeral": True,
            "approvalPolicy": settings.approval_policy,
            **sandbox,
        }
        if self.config.model is not None:
            params["model"] = self.config.model
        if self.config.model_provider is not None:
            params["modelProvider"] = self.config.model_provider
        prepared: asyncio.Task[Any] | None = None
        server = self.server
        assert server is not None
        if self.pool is not None:
            # the shared process has no run's depth variables: the thread's commands get them
            params["config"] = {
                **params.get("config", {}),
                **{
                    f"shell_environment_policy.set.{name}": value
                    for name, value in self.lineage.env().items()
                },
            }
            self._thread_key = json.dumps(params, sort_keys=True)
            self._thread_params = params
            prepared = server.take_thread(self._thread_key)
        started: Any = None
        if prepared is not None:
            # a thread started for this very request after the last run on the process
            try:
                started = await self._race(prepared, "thread/start")
            except (RpcError, ConnectionClosed) as exc:
                _log.debug("the prepared thread failed (%s); starting one", exc)
        if started is None:
            started = await self._call("thread/start", params)
        thread = started.get("thread") if isinstance(started, Mapping) else None
        if not isinstance(thread, Mapping) or not isinstance(thread.get("id"), str):
            raise CodexFailure(f"thread/start answered without a thread id: {str(started)[:200]}")
        self.tracker = TurnTracker(thread["id"])
        assert self.server is not None
        self.server.threads[thread["id"]] = self
        if self._wake.is_set():
            raise CodexFailure(await self._why_stopped())

    async def _start_own(self) -> None:
        config = self.config
        if config.codex_home is not None:
            try:
                os.makedirs(config.codex_home, exist_ok=True)
            except OSError as exc:
                raise StartFailed(
                    f"{self.provider} provider: cannot create codex_home {config.codex_home!r}:"
                    f" {exc.strerror or exc}"
                ) from exc
        env = self.child_env(self.extra_env())
        child = await self.spawn(
            codex_argv(config, env),  # the model's base URL through the run's tape, if any
            what=f"{self.provider} app-server",
            env=env,
            hint=INSTALL_HINT,
        )
        self.take(CodexAppServer(child, config))
        assert self.server is not None
        self.stages.enter("initialize")
        await self.server.initialize(self._call)

    def extra_env(self) -> dict[str, str]:
        """What the transport adds to the scrubbed environment for this run: ``RUST_LOG``,
        ``CODEX_HOME``, and the W3C trace context (codex continues the trace in
        TRACEPARENT/TRACESTATE when its own OTel export is configured; empty unless a
        tracing plugin, dsh-otel, is loaded)."""
        extra = base_extra_env(self.config)
        extra.update({k.upper(): v for k, v in self.request.parent.ctx.tracing.headers().items()})
        return extra

    @property
    def server(self) -> CodexAppServer | None:
        """The app-server (its own, or one taken from the pool)."""
        return self.process

    def attach(self, process: CodexAppServer) -> None:
        """The app-server's messages for this run's thread come to it (what an earlier
        app-server of this run signalled is forgotten: it died before it could serve)."""
        self._wake.clear()
        self._turn_done.clear()
        self.warnings = list(process.warnings)
        process.attach(self)

    def detach(self, process: CodexAppServer) -> None:
        """The app-server's messages go nowhere from now on."""
        process.detach(self)

    async def turn(self) -> SubagentResult:
        tracker = self.tracker
        assert tracker is not None
        self.stages.enter("turn-start")
        text = self.request.prompt_text
        started = await self._call(
            "turn/start",
            {
                "threadId": tracker.thread_id,
                "input": [{"type": "text", "text": text, "text_elements": []}],
            },
            timeout=self.config.start_timeout,
        )
        turn = started.get("turn") if isinstance(started, Mapping) else None
        if isinstance(turn, Mapping) and tracker.turn_id is None:
            tracker.turn_id = str(turn.get("id"))
        self.stages.enter("turn")
        await self._wake.wait()
        if tracker.done:
            return self._completed(tracker)
        if self.fatal is not None:
            with anyio.move_on_after(self.config.cancel_grace):  # codex stops the turn first
                if await self._interrupt():
                    await self._turn_done.wait()
            raise CodexFailure(self.fatal)
        reason = await self._why_stopped()
        self.stages.enter("process")
        raise CodexFailure(f"{reason} before the turn completed")

    async def cancel(self) -> bool:
        return await self._interrupt()

    async def reusable(self, process: CodexAppServer) -> bool:
        """After a completed turn on a healthy app-server that unloaded the thread; it
        then starts the next thread of the same parent and cwd ahead."""
        tracker = self.tracker
        reuse = (
            tracker is not None
            and tracker.status == "completed"
            and self.fatal is None
            and process.healthy
            and await process.unsubscribe(tracker.thread_id, _UNSUBSCRIBE_BOUND)
        )
        if reuse and process.retired is None and self._thread_key is not None:
            # the next run from the same parent, in the same cwd, skips thread/start
            process.prepare_thread(self._thread_key, self._thread_params)
        return reuse

    def run_id(self) -> str:
        tracker = self.tracker
        return f"{self.provider}-{tracker.thread_id}" if tracker else super().run_id()

    def partial_output(self) -> str:
        return self.tracker.partial() if self.tracker is not None else ""

    def usage(self) -> SubagentUsage:
        usage = self.tracker.usage if self.tracker is not None else None
        return usage if usage is not None else SubagentUsage.unknown()

    def describe(self, error: BaseException) -> str:
        if isinstance(error, CodexFailure | RpcError | ConnectionClosed | TimeoutError):
            return f"{self.provider} {self.stages.current} failed: {error}"
        return super().describe(error)

    def details(self) -> str:
        parts = []
        if self.warnings:
            parts.append("codex warnings: " + "; ".join(self.warnings[-3:]))
        if self.server is not None and self.server.conn.noise:
            noise = self.server.conn.noise[-2:]
            parts.append("codex printed non-protocol output: " + " | ".join(noise))
        tail = super().details()
        if tail:
            parts.append(tail)
        return "\n".join(parts)

    # -- what the app-server routes to the run ----------------------------------------

    def on_ended(self) -> None:
        """codex's stdout ended: whatever the run awaits is over."""
        self._turn_done.set()
        self._wake.set()

    def stop_with(self, reason: str) -> None:
        """The run must stop for ``reason`` (its turn is interrupted)."""
        if self.fatal is None:
            self.fatal = reason
        self._wake.set()

    def on_note(self, note: Notification) -> None:
        """A notification about this run's thread, or about no thread."""
        if note.method == "configWarning":
            self.warnings.append(describe_warning(note.params))
            if invalid_configuration(self.warnings[-1]):
                self.stop_with(f"codex rejected its configuration: {self.warnings[-1]}")
        tracker = self.tracker
        if tracker is None:
            return
        if tracker.feed(note):
            self._turn_done.set()
            self._wake.set()
        if note.method == "thread/tokenUsage/updated" and tracker.usage is not None:
            self.report_usage(tracker.usage)  # (a budget's cap stops the run here)
        handle = self.handle
        if handle is not None and handle.wants_progress:
            item = tracker.progress(note)
            if item is not None:
                handle.emit(item)

    def on_request(self, message: ServerRequest) -> ServerRequestAnswer:
        """A server request about this run's thread: answered by the policy."""
        decision = decide(message.method, message.params, approve=self.config.permissions.approve)
        if decision.approved is not None:
            answer = "accepted" if decision.approved else "declined"
            _log.info("codex %s: %s", message.method, answer)
        if decision.fatal is not None:
            self.stop_with(decision.fatal)
        return decision.answer

    # -- the connection ------------------------------------------------------------------

    async def _call(
        self, method: str, params: Mapping[str, Any], *, timeout: float | None = None
    ) -> Any:
        """``method``'s result; :class:`CodexFailure` as soon as codex goes away or the
        run must stop, ``TimeoutError`` after ``timeout``."""
        assert self.server is not None
        return await self._race(self.server.conn.request(method, params), method, timeout)

    async def _race(
        self, request: Awaitable[Any], method: str, timeout: float | None = None
    ) -> Any:
        """The answer to ``request`` (a request to codex, or a prepared one's task)."""
        call = asyncio.ensure_future(request)
        woken = asyncio.ensure_future(self._wake.wait())
        try:
            done, _ = await asyncio.wait(
                {call, woken}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            woken.cancel()
            if not call.done() and not isinstance(request, asyncio.Task):
                call.cancel()
        if (
            call.done()
            and not call.cancelled()
            and not isinstance(call.exception(), ConnectionClosed)
        ):
            return call.result()
        if done:
            raise CodexFailure(await self._why_stopped())
        raise TimeoutError(f"codex did not answer {method} within {timeout:g} s")

    async def _why_stopped(self) -> str:
        if self.fatal is not None:
            return self.fatal
        child, server = self.child, self.server
        assert child is not None
        assert server is not None
        with anyio.move_on_after(1.0):
            await child.wait()  # for its exit status
        if child.returncode is None:
            return f"codex app-server stopped answering ({server.conn.close_reason})"
        if self.stages.current in ("initialize", "thread-start"):
            return f"codex app-server exited ({child.exit_description()}) during the handshake"
        return f"codex app-server exited ({child.exit_description()})"

    async def _interrupt(self) -> bool:
        """``turn/interrupt``; True if codex took it."""
        tracker, server = self.tracker, self.server
        if tracker is None or tracker.turn_id is None or tracker.done or server is None:
            return False
        params = {"threadId": tracker.thread_id, "turnId": tracker.turn_id}
        try:
            await server.conn.request("turn/interrupt", params)
        except Exception as exc:  # "no active turn", or codex went away
            _log.debug("turn/interrupt: %s", exc)
            return False
        return True

    def _completed(self, tracker: TurnTracker) -> SubagentResult:
        name, usage, status = self.provider, self.usage(), tracker.status
        if status == "completed":
            answer = tracker.answer()
            if answer:
                return SubagentResult(answer, "completed", usage=usage)
            reason = f"{name} turn failed: the turn completed without a non-empty agent message"
            return SubagentResult.failed(reason, output=tracker.partial(), usage=usage)
        if status == "failed":
            reason = f"{name} turn failed: {tracker.error_text()}"
            info = (tracker.error or {}).get("codexErrorInfo")
            stop = "max-tokens" if info == "contextWindowExceeded" else "error"
            return SubagentResult(tracker.partial(), stop, diagnostic=reason, usage=usage)
        reason = f"{name} turn failed: codex ended the turn as {status!r} without being asked"
        return SubagentResult.failed(reason, output=tracker.partial(), usage=usage)
