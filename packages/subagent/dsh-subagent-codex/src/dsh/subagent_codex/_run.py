"""One run of ``codex app-server`` on the provider kit (:class:`~dsh.subprocess.SubprocessRun`).

``open``: spawn, ``initialize`` → ``initialized`` → ``thread/start``. ``turn``:
``turn/start``, then the notifications are folded until ``turn/completed``.
``cancel``: ``turn/interrupt``. The kit does the rest (start timeout, abort,
publication, ``turn_timeout``, teardown, settling once). Every request is raced
against codex going away and against a fatal answer (an unknown server request,
a rejected configuration), so a dead or misbehaving codex fails the run at once.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import anyio

from dsh.subagent import (
    InvalidRequest,
    StartFailed,
    SubagentResult,
    SubagentStartRequest,
    SubagentUsage,
)
from dsh.subagent_codex._config import CodexConfig
from dsh.subagent_codex._policy import decide
from dsh.subagent_codex._rpc import (
    AppServerConnection,
    ConnectionClosed,
    Notification,
    RpcError,
    ServerRequest,
    ServerRequestAnswer,
)
from dsh.subagent_codex._turn import TurnTracker
from dsh.subprocess import SubprocessRun

__all__ = ["CodexFailure", "CodexRun"]

_log = logging.getLogger("dsh.subagent_codex")

_OPT_OUT = ["account/rateLimits/updated", "remoteControl/status/changed", "thread/started"]
"""Notifications the provider never reads (codex then does not send them)."""

_INSTALL_HINT = (
    "install the Codex CLI (npm install -g @openai/codex, or tools/install-codex.sh in the dsh"
    " repository) or set `command` in the dsh-subagent-codex config to the codex executable"
)

try:
    _VERSION = version("dsh-subagent-codex")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    _VERSION = "0"


class CodexFailure(Exception):
    """Why the run cannot go on (codex went away, a fatal request, a rejected config)."""


class CodexRun(SubprocessRun):
    """The connection and turn state of one codex run (see the module docstring)."""

    config: CodexConfig

    def __init__(self, config: CodexConfig, request: SubagentStartRequest) -> None:
        super().__init__(config.name, request, config)
        self.conn: AppServerConnection | None = None
        self.tracker: TurnTracker | None = None
        self.warnings: list[str] = []
        self.fatal: str | None = None
        """Why the run must stop, when codex asked something it cannot be answered."""
        self._wake = asyncio.Event()
        """Set when the turn completed, ``fatal`` was set, or codex's stdout ended."""
        self._turn_done = asyncio.Event()
        """Set when the turn completed or codex's stdout ended."""
        self._reader: asyncio.Task[None] | None = None

    # -- the kit's hooks ---------------------------------------------------------------

    async def open(self) -> None:
        config = self.config
        if not self.request.prompt_text.strip():
            raise InvalidRequest(
                f"{self.provider} provider: the prompt has no text (codex takes text prompts only)"
            )
        extra = {"RUST_LOG": "warn"}
        if config.codex_home is not None:
            try:
                os.makedirs(config.codex_home, exist_ok=True)
            except OSError as exc:
                raise StartFailed(
                    f"{self.provider} provider: cannot create codex_home {config.codex_home!r}:"
                    f" {exc.strerror or exc}"
                ) from exc
            extra["CODEX_HOME"] = config.codex_home
        # W3C trace context: codex continues the trace in TRACEPARENT/TRACESTATE when its own
        # OTel trace export is configured; empty unless a tracing plugin (dsh-otel) is loaded
        extra.update({k.upper(): v for k, v in self.request.parent.ctx.tracing.headers().items()})
        child = await self.spawn(
            what=f"{self.provider} app-server", env=self.child_env(extra), hint=_INSTALL_HINT
        )
        self.conn = AppServerConnection(
            child.stdin, child.stdout, on_notification=self._on_note, on_request=self._on_request
        )
        self._reader = self.request.parent.ctx.spawn(self._read, self.conn)
        self.stages.enter("initialize")
        client = {"name": "dsh", "title": "dsh subagent", "version": _VERSION}
        capabilities = {
            "experimentalApi": False,
            "requestAttestation": False,
            "optOutNotificationMethods": _OPT_OUT,
        }
        await self._call("initialize", {"clientInfo": client, "capabilities": capabilities})
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
        started = await self._call("thread/start", params)
        thread = started.get("thread") if isinstance(started, Mapping) else None
        if not isinstance(thread, Mapping) or not isinstance(thread.get("id"), str):
            raise CodexFailure(f"thread/start answered without a thread id: {str(started)[:200]}")
        self.tracker = TurnTracker(thread["id"])
        if self._wake.is_set():
            raise CodexFailure(await self._why_stopped())

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

    async def close(self) -> None:
        await super().close()
        reader = self._reader
        if reader is not None and not reader.done():
            await asyncio.wait({reader}, timeout=1.0)
            reader.cancel()

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
        if self.conn is not None and self.conn.noise:
            parts.append("codex printed non-protocol output: " + " | ".join(self.conn.noise[-2:]))
        parts.append(super().details())
        return "\n".join(part for part in parts if part)

    # -- the connection ------------------------------------------------------------------

    async def _read(self, conn: AppServerConnection) -> None:
        try:
            await conn.read_loop()
        finally:
            self._turn_done.set()
            self._wake.set()

    def _stop_with(self, reason: str) -> None:
        if self.fatal is None:
            self.fatal = reason
        self._wake.set()

    def _on_note(self, note: Notification) -> None:
        if note.method == "configWarning":
            summary = str(note.params.get("summary") or "")
            details = note.params.get("details")
            self.warnings.append((f"{summary}: {details}" if details else summary)[:500])
            if summary.startswith("Invalid configuration"):
                self._stop_with(f"codex rejected its configuration: {self.warnings[-1]}")
        tracker = self.tracker
        if tracker is None:
            return
        if tracker.feed(note):
            self._turn_done.set()
            self._wake.set()
        handle = self.handle
        if handle is not None and handle.wants_progress:
            item = tracker.progress(note)
            if item is not None:
                handle.emit(item)

    def _on_request(self, message: ServerRequest) -> ServerRequestAnswer:
        decision = decide(message.method, message.params, approve=self.config.permissions.approve)
        if decision.approved is not None:
            answer = "accepted" if decision.approved else "declined"
            _log.info("codex %s: %s", message.method, answer)
        if decision.fatal is not None:
            self._stop_with(decision.fatal)
        return decision.answer

    async def _call(
        self, method: str, params: Mapping[str, Any], *, timeout: float | None = None
    ) -> Any:
        """``method``'s result; :class:`CodexFailure` as soon as codex goes away or the
        run must stop, ``TimeoutError`` after ``timeout``."""
        assert self.conn is not None
        call = asyncio.ensure_future(self.conn.request(method, params))
        woken = asyncio.ensure_future(self._wake.wait())
        try:
            done, _ = await asyncio.wait(
                {call, woken}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            woken.cancel()
            if not call.done():
                call.cancel()
        if call.done() and not isinstance(call.exception(), ConnectionClosed):
            return call.result()
        if done:
            raise CodexFailure(await self._why_stopped())
        raise TimeoutError(f"codex did not answer {method} within {timeout:g} s")

    async def _why_stopped(self) -> str:
        if self.fatal is not None:
            return self.fatal
        child, conn = self.child, self.conn
        assert child is not None
        assert conn is not None
        with anyio.move_on_after(1.0):
            await child.wait()  # for its exit status
        if child.returncode is None:
            return f"codex app-server stopped answering ({conn.close_reason})"
        if self.stages.current in ("initialize", "thread-start"):
            return f"codex app-server exited ({child.exit_description()}) during the handshake"
        return f"codex app-server exited ({child.exit_description()})"

    async def _interrupt(self) -> bool:
        """``turn/interrupt``; True if codex took it."""
        tracker, conn = self.tracker, self.conn
        if tracker is None or tracker.turn_id is None or tracker.done or conn is None:
            return False
        params = {"threadId": tracker.thread_id, "turnId": tracker.turn_id}
        try:
            await conn.request("turn/interrupt", params)
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
