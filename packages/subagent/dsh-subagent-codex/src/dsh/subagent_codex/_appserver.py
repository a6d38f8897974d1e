"""One ``codex app-server`` process: its connection, its handshake, and the runs on it.

A run either starts its own (the default) or takes one from the provider's warm
pool. Either way the process is a :class:`CodexAppServer`: it reads codex's
stdout and routes each message to the run whose thread it concerns (codex puts
``threadId`` — ``conversationId`` in the legacy approval requests — on every
notification and server request about a thread), so several runs can share one
app-server, one thread each. Messages about no thread (``configWarning``...) go
to every run on it; a server request no run owns is answered by the policy.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Protocol

import anyio

from dsh.subagent import StartFailed
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
from dsh.subagent_codex._tape import codex_argv
from dsh.subprocess import ChildProcess, PooledProcess, Sandbox, Starting, start_pooled_process

__all__ = [
    "INSTALL_HINT",
    "CodexAppServer",
    "ThreadUser",
    "base_extra_env",
    "invalid_configuration",
    "start_pooled",
]

_log = logging.getLogger("dsh.subagent_codex")

_OPT_OUT = ["account/rateLimits/updated", "remoteControl/status/changed", "thread/started"]
"""Notifications the provider never reads (codex then does not send them)."""

INSTALL_HINT = (
    "install the Codex CLI (npm install -g @openai/codex, or tools/install-codex.sh in the dsh"
    " repository) or set `command` in the dsh-subagent-codex config to the codex executable"
)

try:
    _VERSION = version("dsh-subagent-codex")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    _VERSION = "0"

Call = Callable[[str, Mapping[str, Any]], Awaitable[Any]]


class ThreadUser(Protocol):
    """What an app-server needs of a run on it."""

    def on_note(self, note: Notification) -> None:
        """A notification about the run's thread, or about no thread."""

    def on_request(self, message: ServerRequest) -> ServerRequestAnswer:
        """A server request about the run's thread (answered at once)."""

    def on_ended(self) -> None:
        """codex's stdout ended."""

    def stop_with(self, reason: str) -> None:
        """Something fatal happened that is not the run's own doing."""


class CodexAppServer(PooledProcess):
    """One ``codex app-server`` and its connection (see the module docstring)."""

    def __init__(self, child: ChildProcess, config: CodexConfig) -> None:
        super().__init__(child)
        self.config = config
        self.users: set[ThreadUser] = set()
        """Runs on this app-server (from before their thread exists)."""
        self.threads: dict[str, ThreadUser] = {}
        """Thread id → the run it belongs to."""
        self.warnings: list[str] = []
        """codex's ``configWarning``\\ s about the process (not a thread)."""
        self.conn = AppServerConnection(
            child.stdin, child.stdout, on_notification=self._on_note, on_request=self._on_request
        )
        self._reader = asyncio.get_running_loop().create_task(
            self._read(), name=f"{config.name} app-server reader"
        )
        self._spare: tuple[str, asyncio.Task[Any]] | None = None
        self._chores: set[asyncio.Task[Any]] = set()

    @property
    def healthy(self) -> bool:
        """Alive, and its stdout still open."""
        return self.alive and not self.conn.closed

    async def initialize(self, call: Call) -> None:
        """``initialize`` then ``initialized`` (``call`` sends a request and waits)."""
        client = {"name": "dsh", "title": "dsh subagent", "version": _VERSION}
        capabilities = {
            "experimentalApi": False,
            "requestAttestation": False,
            "optOutNotificationMethods": _OPT_OUT,
        }
        await call("initialize", {"clientInfo": client, "capabilities": capabilities})
        await self.conn.notify("initialized")

    def attach(self, user: ThreadUser) -> None:
        """``user`` starts working on this app-server."""
        self.users.add(user)
        if self.conn.closed:
            user.on_ended()

    def detach(self, user: ThreadUser) -> None:
        """``user`` is done: its messages go nowhere from now on."""
        self.users.discard(user)
        for thread, owner in list(self.threads.items()):
            if owner is user:
                del self.threads[thread]

    async def unsubscribe(self, thread_id: str, timeout: float) -> bool:
        """``thread/unsubscribe`` (codex unloads the thread); True if codex took it."""
        try:
            with anyio.fail_after(timeout):
                await self.conn.request("thread/unsubscribe", {"threadId": thread_id})
        except (RpcError, ConnectionClosed, TimeoutError) as exc:
            _log.debug("thread/unsubscribe %s: %s", thread_id, exc)
            return False
        return True

    def prepare_thread(self, key: str, params: Mapping[str, Any]) -> None:
        """Start a thread with ``params`` now, for the next run that would start the very
        same one (:meth:`take_thread` with the same ``key``): that run then skips
        ``thread/start``. The thread is fresh (no turn), ephemeral, and unloaded if no
        run wants it."""
        self._drop_spare()
        if not self.healthy:
            return
        request = self.conn.request("thread/start", dict(params))
        self._spare = (key, self._chore(request, "spare thread"))

    def take_thread(self, key: str) -> asyncio.Task[Any] | None:
        """The prepared ``thread/start`` (its answer) if it was prepared with ``key``."""
        spare, self._spare = self._spare, None
        if spare is not None and spare[0] == key:
            return spare[1]
        if spare is not None:
            self._spare = spare
            self._drop_spare()
        return None

    def _drop_spare(self) -> None:
        spare, self._spare = self._spare, None
        if spare is not None:
            self._chore(self._unload(spare[1]), "unload spare thread")

    async def _unload(self, started: asyncio.Task[Any]) -> None:
        answer = await started
        thread = answer.get("thread") if isinstance(answer, Mapping) else None
        if isinstance(thread, Mapping) and isinstance(thread.get("id"), str):
            await self.unsubscribe(thread["id"], 2.0)

    def _chore(self, coro: Awaitable[Any], what: str) -> asyncio.Task[Any]:
        # a context of its own: the process outlives the run that asked for it
        task = asyncio.get_running_loop().create_task(
            _awaited(coro), name=f"{self.config.name} {what}", context=contextvars.Context()
        )
        self._chores.add(task)
        task.add_done_callback(_forget(self._chores))
        return task

    async def _read(self) -> None:
        try:
            await self.conn.read_loop()
        finally:
            for user in list(self.users):
                user.on_ended()

    def _owner(self, params: Mapping[str, Any]) -> ThreadUser | None:
        thread = params.get("threadId", params.get("conversationId"))
        return self.threads.get(thread) if isinstance(thread, str) else None

    def _on_note(self, note: Notification) -> None:
        owner = self._owner(note.params)
        if owner is not None:
            owner.on_note(note)
            return
        if "threadId" in note.params:
            return  # a thread no run owns (any more)
        if note.method == "configWarning":
            self.warnings.append(describe_warning(note.params))
        for user in list(self.users):
            user.on_note(note)

    def _on_request(self, message: ServerRequest) -> ServerRequestAnswer:
        owner = self._owner(message.params)
        params = message.params
        if (
            owner is None
            and len(self.users) == 1
            and not ({"threadId", "conversationId"} & params.keys())
        ):
            owner = next(iter(self.users))  # about no thread: the only run on it
        if owner is not None:
            return owner.on_request(message)
        decision = decide(message.method, message.params, approve=self.config.permissions.approve)
        if decision.fatal is not None:
            for user in list(self.users):
                user.stop_with(decision.fatal)
        return decision.answer

    async def aclose(self, *, eof_grace: float, term_grace: float) -> None:
        """Stop the process tree, then the reader (it ends at EOF; bounded)."""
        self._spare = None
        for chore in list(self._chores):
            chore.cancel()
        await super().aclose(eof_grace=eof_grace, term_grace=term_grace)
        if self._chores:
            await asyncio.wait(set(self._chores), timeout=1.0)
        reader = self._reader
        if not reader.done():
            await asyncio.wait({reader}, timeout=1.0)
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def _forget(chores: set[asyncio.Task[Any]]) -> Callable[[asyncio.Task[Any]], None]:
    def done(task: asyncio.Task[Any]) -> None:
        chores.discard(task)
        if not task.cancelled() and task.exception() is not None:
            _log.debug("%s: %s", task.get_name(), task.exception())

    return done


def describe_warning(params: Mapping[str, Any]) -> str:
    """A ``configWarning`` as one line."""
    summary = str(params.get("summary") or "")
    details = params.get("details")
    return (f"{summary}: {details}" if details else summary)[:500]


def invalid_configuration(warning: str) -> bool:
    """Does this ``configWarning`` mean codex runs without the configuration it was given?"""
    return warning.startswith("Invalid configuration")


def base_extra_env(config: CodexConfig) -> dict[str, str]:
    """What every codex child gets on top of the scrubbed environment (before ``env``)."""
    extra = {"RUST_LOG": "warn"}
    if config.codex_home is not None:
        extra["CODEX_HOME"] = config.codex_home
    return extra


async def start_pooled(
    starting: Starting,
    *,
    config: CodexConfig,
    env: Mapping[str, str],
    cwd: str,
    sandbox: Sandbox | None = None,
) -> CodexAppServer:
    """Start one app-server for the pool and handshake (``initialize``, ``initialized``).

    Its environment is the provider's, with no run's depth variables (those go in
    each thread's ``config``) and no trace context; it runs in ``sandbox`` (the pool's).
    A failure raises
    :class:`~dsh.subagent.StartFailed` naming the stage, with codex's stderr tail; the
    process is stopped first.
    """
    if config.codex_home is not None:
        try:
            os.makedirs(config.codex_home, exist_ok=True)
        except OSError as exc:
            raise StartFailed(
                f"{config.name} provider: cannot create codex_home {config.codex_home!r}:"
                f" {exc.strerror or exc}"
            ) from exc
    return await start_pooled_process(
        starting,
        codex_argv(config, env),
        provider=config.name,
        what=f"{config.name} app-server",
        env=env,
        cwd=cwd,
        sandbox=sandbox,
        connect=lambda child: CodexAppServer(child, config),
        handshake=_handshake,
        describe=_describe_start_failure,
        term_grace=config.term_grace,
        hint=INSTALL_HINT,
    )


async def _handshake(server: CodexAppServer) -> None:
    """``initialize`` a pooled app-server; a configuration codex rejects fails it."""
    await server.initialize(server.conn.request)
    fatal = [w for w in server.warnings if invalid_configuration(w)]
    if fatal:
        raise StartFailed(f"codex rejected its configuration: {fatal[-1]}")


def _describe_start_failure(server: CodexAppServer, error: Exception) -> str:
    name = server.config.name
    if isinstance(error, ConnectionClosed):
        return (
            f"{name} initialize failed: codex app-server exited"
            f" ({server.child.exit_description()}) during the handshake"
        )
    return f"{name} initialize failed: {error}"
