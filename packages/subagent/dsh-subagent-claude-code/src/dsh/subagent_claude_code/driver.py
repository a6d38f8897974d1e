"""One Claude Code run: spawn the CLI, drive ``claude_agent_sdk.query`` over it, settle.

Imported on the first start only (``claude_agent_sdk`` takes seconds to import),
so loading the plugin stays cheap.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import uuid
from collections.abc import AsyncGenerator
from typing import Any, cast

import anyio
from claude_agent_sdk import (
    ClaudeAgentOptions,
    ClaudeSDKError,
    Message,
    PermissionResultDeny,
    ResultMessage,
    ToolPermissionContext,
    query,
)

from dsh.subagent import SubagentError, SubagentResult, SubagentRun, SubagentStartRequest
from dsh.subagent.out_of_process import ProcessTag, Stages, settle_from
from dsh.subagent_claude_code.command import child_env, cli_argv
from dsh.subagent_claude_code.config import ClaudeCodeConfig
from dsh.subagent_claude_code.outcome import RunFold
from dsh.subagent_claude_code.transport import CLIProcessTransport

__all__ = ["DENIAL_MESSAGE", "asks_for_permission", "deny_unattended", "launch"]

DENIAL_MESSAGE = "this unattended subagent cannot ask for approval"
"""What every permission question from the CLI is answered with (a denial)."""

_NEVER_ASKS = frozenset({"dontAsk", "bypassPermissions"})


def asks_for_permission(permission_mode: str) -> bool:
    """Whether the CLI asks before a tool call in ``permission_mode`` (and so consults
    the deny callback). ``dontAsk`` denies by itself and ``bypassPermissions`` allows."""
    return permission_mode not in _NEVER_ASKS


async def deny_unattended(
    tool_name: str, tool_input: dict[str, Any], context: ToolPermissionContext
) -> PermissionResultDeny:
    """The ``can_use_tool`` callback: refuse, and tell the model why and what to do."""
    return PermissionResultDeny(
        message=f"{DENIAL_MESSAGE} to use {tool_name}; continue without it, or say in your"
        " answer what you would have needed",
        interrupt=False,
    )


async def launch(
    config: ClaudeCodeConfig, request: SubagentStartRequest, *, cli: str, cwd: str, run_id: str
) -> SubagentRun:
    """Start the CLI and publish the run (the CLI is running when this returns).

    An abort before publication stops the CLI and raises ``SubagentError`` ABORTED.
    """
    env = child_env(config, cwd)
    asks = asks_for_permission(config.permission_mode)
    transport = CLIProcessTransport(
        cli_argv(config, cli, permission_prompts=asks),
        env=env,
        cwd=cwd,
        # unique across processes (run ids restart in each), prefixed for a supervisor's sweep
        tag=ProcessTag(f"{run_id}-{uuid.uuid4().hex}"),
        term_grace=config.term_grace,
    )
    try:
        await transport.connect()
        if request.signal.aborted:
            raise SubagentError(f"subagent start aborted: {request.signal.reason}", "ABORTED")
    except BaseException:
        with anyio.CancelScope(shield=True):
            await transport.close()
        raise
    options = ClaudeAgentOptions(can_use_tool=deny_unattended if asks else None, env=env)
    return _Run(config, request, transport, options, run_id).publish()


class _Run:
    """The driver of one published run."""

    def __init__(
        self,
        config: ClaudeCodeConfig,
        request: SubagentStartRequest,
        transport: CLIProcessTransport,
        options: ClaudeAgentOptions,
        run_id: str,
    ) -> None:
        self.config = config
        self.request = request
        self.transport = transport
        self.options = options
        self.fold = RunFold(
            config.name, permission_mode=config.permission_mode, max_turns=config.max_turns
        )
        self.stages = Stages(config.name, "initialize")
        self.scope = anyio.CancelScope()
        self.done = asyncio.Event()
        self.stop_reason: str | None = None
        self.run = SubagentRun(
            run_id, provider=config.name, dispose=self.dispose, label=request.label
        )

    def publish(self) -> SubagentRun:
        """Start driving in a task of the parent's context; return the run."""
        task = self.request.parent.ctx.spawn(self.main)
        task.add_done_callback(lambda _: self.done.set())  # even if it never got to run
        self.unlink = self.request.signal.on_abort(self.stop)
        return self.run

    def stop(self, reason: str) -> None:
        """Cancel the run (first reason wins); the driver then tears the CLI down."""
        if self.stop_reason is None:
            self.stop_reason = reason
        self.scope.cancel()

    async def dispose(self) -> None:
        """Stop what is left and wait until the CLI's whole tree is gone."""
        self.stop("disposed")
        await self.done.wait()
        self.unlink()
        await self.transport.close()  # no-op unless the driver never ran
        self.run.settle(self.fold.aborted(self.stop_reason or "disposed"))

    async def main(self) -> None:
        try:
            await settle_from(
                self.run,
                self.produce,
                describe=self.stages.describe,
                on_cancel=lambda: self.fold.aborted(self.stop_reason or "cancelled"),
            )
        finally:
            await self.transport.close()  # kills synchronously if this is interrupted

    async def produce(self) -> SubagentResult:
        error: BaseException | None = None
        limit = self.config.run_timeout
        with self.scope:
            with anyio.move_on_after(limit if limit is not None else math.inf) as timer:
                messages = cast(
                    AsyncGenerator[Message, None],
                    query(
                        prompt=self.request.prompt_text,
                        options=self.options,
                        transport=self.transport,
                    ),
                )
                async with contextlib.aclosing(messages):
                    try:
                        async for message in messages:
                            if self.stages.current == "initialize":
                                self.stages.enter("turn")
                            self.fold.feed(message)
                            if isinstance(message, ResultMessage):
                                # The answer is in: the CLI gets exit_grace to exit on
                                # its own (stdin is closed for it), then teardown.
                                self.stages.enter("exit")
                                timer.deadline = min(
                                    timer.deadline, anyio.current_time() + self.config.exit_grace
                                )
                    except ClaudeSDKError as exc:
                        error = exc
        self.stages.enter("teardown")
        await self.transport.close()
        if not self.fold.has_result and (self.scope.cancelled_caught or self.stop_reason):
            return self.fold.aborted(self.stop_reason or "cancelled")
        stderr = self.transport.stderr_text()
        if timer.cancelled_caught and not self.fold.has_result:
            assert limit is not None
            return self.fold.timed_out(limit, stderr=stderr)
        return self.fold.result(
            error=error, stderr=stderr, exit_description=self.transport.exit_description()
        )
