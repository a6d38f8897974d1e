"""``AcpProvider``: a subagent that is another agent process spoken to over ACP.

``start`` spawns the configured command in its own process group (with a
credential-scrubbed environment), opens an ACP connection over its stdio,
sends ``initialize`` and ``session/new`` (cwd: config, else the parent
session's), then publishes the run. The prompt runs in a task owned by the
context and settles the run; a cancel sends ``session/cancel`` and settles
``aborted``; ``dispose`` closes stdin, waits, SIGTERMs the group, waits,
SIGKILLs and reaps. A start that fails or is aborted raises and leaves no
process behind.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import itertools
import logging
import os
import sys
import threading
from typing import TYPE_CHECKING, Any

import anyio

from dsh.subagent import (
    NO_START_CAPABILITIES,
    SubagentCapabilities,
    SubagentError,
    SubagentResult,
    SubagentRun,
    SubagentStartRequest,
)
from dsh.subagent.out_of_process import (
    ChildProcess,
    ProcessTag,
    Stages,
    resolve_child_cwd,
    scrubbed_env,
    settle_from,
)
from dsh.subagent_acp.config import AcpProviderConfig

if TYPE_CHECKING:
    from acp.schema import PromptResponse

    from dsh.subagent_acp.link import AgentLink

__all__ = ["STOP_REASONS", "AcpProvider"]

_log = logging.getLogger("dsh.subagent_acp")

STOP_REASONS = {
    "end_turn": "completed",
    "max_tokens": "max-tokens",
    "refusal": "refusal",
    "cancelled": "aborted",
}
"""ACP stop reason → dsh stop reason; any other ACP reason is ``error``."""

_VERSION = "0.1.0"
_LINK_MODULE = "dsh.subagent_acp.link"
_run_numbers = itertools.count(1)


_link_import: concurrent.futures.Future[None] | None = None


async def _load_link_module() -> None:
    """Import ``acp`` (≈1.5 s of pydantic model building) in a thread of its own.

    The event loop keeps running meanwhile, and the agent process (spawned just
    before) boots in parallel on another core. Concurrent starts share the one
    import; an abandoned wait (abort) leaves it running for the next start.
    """
    global _link_import
    module = sys.modules.get(_LINK_MODULE)
    if module is not None and hasattr(module, "AgentLink"):
        return
    if _link_import is None:
        _link_import = concurrent.futures.Future()
        threading.Thread(
            target=_import_link, args=(_link_import,), name="dsh-acp-import", daemon=True
        ).start()
    await asyncio.shield(asyncio.wrap_future(_link_import))


def _import_link(future: concurrent.futures.Future[None]) -> None:
    try:
        importlib.import_module(_LINK_MODULE)
    except BaseException as exc:
        future.set_exception(exc)
    else:
        future.set_result(None)


class AcpProvider:
    """Runs each child as a configured ACP agent process (see the module docstring)."""

    capabilities: SubagentCapabilities = NO_START_CAPABILITIES
    inherits_parent_context = False

    def __init__(self, config: AcpProviderConfig) -> None:
        self.config = config
        self.name = config.name

    def __repr__(self) -> str:
        return f"<AcpProvider {self.name}: {' '.join(self.config.argv)}>"

    async def start(self, request: SubagentStartRequest) -> SubagentRun:
        """Spawn the agent, open an ACP session, publish the run, send the prompt."""
        signal = request.signal
        if signal.aborted:
            raise SubagentError(f"subagent start aborted: {signal.reason}", "ABORTED")
        cwd = resolve_child_cwd(self.config.cwd, request.parent, provider=self.name)
        env = scrubbed_env(self.config.env)
        # The tag lets teardown find the agent's tool processes even when they
        # started sessions of their own (left the process group).
        child = await ChildProcess.start(
            self.config.argv, env=env, cwd=cwd, what=f"{self.name} agent", tag=ProcessTag()
        )
        live = _AcpRun(self, request, child)
        try:
            await live.open(cwd)
            return live.publish()
        except BaseException:
            await live.teardown(eof_grace=0.0)
            raise


class _AcpRun:
    """The state of one run: its process, its ACP link, its driver task."""

    def __init__(
        self, provider: AcpProvider, request: SubagentStartRequest, child: ChildProcess
    ) -> None:
        self.provider = provider
        self.config = provider.config
        self.name = provider.name
        self.request = request
        self.child = child
        self.link: AgentLink | None = None
        self.stages = Stages(self.name, "start")
        self.run: SubagentRun | None = None
        self.driver: asyncio.Task[Any] | None = None
        self.id = f"{self.name}-{os.getpid()}-{next(_run_numbers)}"

    # -- before publication -------------------------------------------------------------

    async def open(self, cwd: str) -> None:
        """initialize → session/new, abortable by the signal and bounded in time.

        Raises ``ABORTED`` or ``START_FAILED`` (the caller tears the child down).
        """
        signal = self.request.signal
        scope = anyio.CancelScope()
        unlink = signal.on_abort(lambda _reason: scope.cancel())
        timeout = self.config.startup_timeout
        try:
            with scope:
                self.stages.enter("start")
                await _load_link_module()
                from dsh.subagent_acp.link import AgentLink

                self.link = AgentLink(self.child, self.config)
                with anyio.fail_after(timeout):
                    self.stages.enter("initialize")
                    await self.link.initialize(_VERSION)
                    self.stages.enter("session/new")
                    await self.link.new_session(cwd)
        except TimeoutError:
            if signal.aborted:
                raise self._aborted() from None
            raise SubagentError(
                self._with_stderr(
                    f"{self.name} agent did not open an ACP session within {timeout:g}s"
                    f" (no answer to {self.stages.current})"
                ),
                "START_FAILED",
            ) from None
        except Exception as exc:
            if signal.aborted:
                raise self._aborted() from None
            if getattr(exc, "kind", None) in ("exited", "closed"):
                await self.child.drain_stderr()  # the agent's last words
            raise SubagentError(self._describe(exc), "START_FAILED") from None
        finally:
            unlink()
        if signal.aborted:
            raise self._aborted()

    def _aborted(self) -> SubagentError:
        return SubagentError(f"subagent start aborted: {self.request.signal.reason}", "ABORTED")

    def publish(self) -> SubagentRun:
        """Hand the run over; the prompt runs in a task the context owns."""
        self.run = SubagentRun(
            self.id, provider=self.name, dispose=self.dispose, label=self.request.label
        )
        self.stages.enter("session/prompt")
        self.driver = self.request.parent.ctx.spawn(self._drive)
        return self.run

    # -- after publication --------------------------------------------------------------

    async def _drive(self) -> None:
        assert self.run is not None
        await settle_from(
            self.run, self._produce, describe=self._describe, on_cancel=self._disposed_result
        )

    def _disposed_result(self) -> SubagentResult:
        reason = self.request.signal.reason or "the run was disposed before the agent finished"
        return SubagentResult.aborted(reason, output=self._output())

    def _output(self) -> str:
        return self.link.fold.output() if self.link is not None else ""

    async def _produce(self) -> SubagentResult:
        from dsh.subagent_acp.link import LinkError

        link = self.link
        assert link is not None
        signal = self.request.signal
        if signal.aborted:
            return SubagentResult.aborted(signal.reason)
        texts = [
            str(block.get("text", ""))
            for block in self.request.prompt_blocks
            if block.get("type") == "text"
        ]
        turn = asyncio.ensure_future(link.prompt(texts, self.config.turn_timeout))
        aborted = asyncio.ensure_future(signal.wait())
        try:
            await asyncio.wait({turn, aborted}, return_when=asyncio.FIRST_COMPLETED)
            if not turn.done():
                return await self._cancel(turn)
            try:
                response = turn.result()
            except LinkError as exc:
                if exc.kind in ("exited", "closed"):
                    await self.child.drain_stderr()  # the agent's last words
                return SubagentResult.failed(self._describe(exc), output=self._output())
            return self._result_from(response)
        finally:
            aborted.cancel()
            if not turn.done():
                turn.cancel()
            await asyncio.wait({turn, aborted})

    async def _cancel(self, turn: asyncio.Future[PromptResponse]) -> SubagentResult:
        from dsh.subagent_acp.link import LinkError

        link = self.link
        assert link is not None
        reason = self.request.signal.reason or "cancelled"
        self.stages.enter("session/cancel")
        sent = await link.cancel()
        grace = self.config.cancel_grace
        await asyncio.wait({turn}, timeout=grace)
        if not turn.done():
            how = "did not confirm session/cancel" if sent else "could not be sent session/cancel"
            return SubagentResult.aborted(
                f"{reason} (the agent {how} within {grace:g}s and was stopped)",
                output=self._output(),
            )
        try:
            response = turn.result()
        except LinkError as exc:
            return SubagentResult.aborted(f"{reason} (then: {exc.message})", output=self._output())
        if response.stop_reason == "cancelled":
            return SubagentResult.aborted(reason, output=self._output())
        return SubagentResult.aborted(
            f"{reason} (the agent ended its turn with {response.stop_reason!r} before it"
            " saw the cancel)",
            output=self._output(),
        )

    def _result_from(self, response: PromptResponse) -> SubagentResult:
        acp_reason = response.stop_reason
        stop = STOP_REASONS.get(acp_reason, "error")
        diagnostic: str | None = None
        if stop == "error":
            diagnostic = f"the agent stopped with stop reason {acp_reason!r}"
        elif stop == "aborted":
            diagnostic = "the agent reported its turn cancelled although dsh did not cancel it"
        elif stop != "completed":
            diagnostic = f"the agent stopped with stop reason {acp_reason!r}"
        if diagnostic is not None:
            diagnostic = self._with_permissions(f"{self.name} session/prompt: {diagnostic}")
        return SubagentResult(
            self._output(), stop, diagnostic=diagnostic, usage=_usage_of(response)
        )

    # -- teardown -----------------------------------------------------------------------

    async def dispose(self) -> None:
        """Stop the driver (settling ``aborted`` if still running), then the process."""
        driver = self.driver
        if driver is not None and not driver.done():
            driver.cancel()
            await asyncio.wait({driver})
        await self.teardown(eof_grace=self.config.eof_grace)

    async def teardown(self, *, eof_grace: float) -> None:
        """Close the connection, then stop and reap the process group (shielded)."""
        try:
            with anyio.CancelScope(shield=True):
                if self.link is not None:
                    await self.link.close()
                ending = await self.child.terminate(
                    eof_grace=eof_grace, term_grace=self.config.term_grace
                )
        except BaseException:
            self.child.kill_tree()  # interrupted by a raw cancel: kill now, no waiting
            raise
        _log.debug("%s agent %s: %s", self.name, ending, self.child.exit_description())

    # -- diagnostics --------------------------------------------------------------------

    def _describe(self, error: BaseException) -> str:
        message = getattr(error, "message", None)
        if isinstance(message, str) and message:
            text = f"{self.name} {self.stages.current} failed: {message}"
        else:
            text = self.stages.describe(error)
        return self._with_stderr(self._with_permissions(text))

    def _with_permissions(self, text: str) -> str:
        summary = self.link.client.describe_decisions() if self.link is not None else None
        return f"{text}\n{summary}" if summary else text

    def _with_stderr(self, text: str) -> str:
        tail = self.child.stderr_tail.text(max_chars=1500)
        if not tail:
            return text
        return f"{text}\nagent stderr (last lines):\n{tail}"


def _usage_of(response: PromptResponse) -> dict[str, int] | None:
    usage = getattr(response, "usage", None)
    if usage is None:
        return None
    found: dict[str, int] = {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
    }
    for name in ("thought_tokens", "cached_read_tokens", "cached_write_tokens"):
        value = getattr(usage, name, None)
        if value is not None:
            found[name] = value
    return found
