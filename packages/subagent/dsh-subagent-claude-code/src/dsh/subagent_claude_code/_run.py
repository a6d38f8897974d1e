"""One Claude Code run on the provider kit: spawn the CLI, drive ``claude_agent_sdk.query``
over it, fold its messages, interrupt it on cancel.

Imported on the first start only (``claude_agent_sdk`` takes seconds to import),
so loading the plugin stays cheap.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from typing import Any, cast

from claude_agent_sdk import (
    ClaudeAgentOptions,
    ClaudeSDKError,
    Message,
    PermissionResultDeny,
    ResultMessage,
    ToolPermissionContext,
    query,
)

from dsh.subagent import SubagentResult, SubagentStartRequest, SubagentUsage
from dsh.subagent_claude_code._command import (
    asks_for_permission,
    cli_argv,
    env_defaults,
    through_tape,
)
from dsh.subagent_claude_code._config import ClaudeCodeConfig
from dsh.subagent_claude_code._fold import RunFold
from dsh.subagent_claude_code._transport import CLITransport
from dsh.subprocess import SubprocessRun

__all__ = ["DENIAL_MESSAGE", "ClaudeCodeRun", "deny_unattended"]

DENIAL_MESSAGE = "this unattended subagent cannot ask for approval"
"""What every permission question from the CLI is answered with (a denial)."""


async def deny_unattended(
    tool_name: str, tool_input: dict[str, Any], context: ToolPermissionContext
) -> PermissionResultDeny:
    """The ``can_use_tool`` callback: refuse, and tell the model why and what to do."""
    return PermissionResultDeny(
        message=f"{DENIAL_MESSAGE} to use {tool_name}; continue without it, or say in your"
        " answer what you would have needed",
        interrupt=False,
    )


class ClaudeCodeRun(SubprocessRun):
    """The CLI as the run's child process; the SDK's ``query`` drives the turn."""

    config: ClaudeCodeConfig
    budget_caps = frozenset(("tokens", "seconds", "turns"))
    """Enforced from this side: the CLI reports each model call's usage as it ends
    (its Task agents' too); its cost only with the result, its delegations not."""

    def __init__(self, request: SubagentStartRequest, config: ClaudeCodeConfig, cli: str) -> None:
        super().__init__(config.name, request, config)
        self.cli = cli
        self.fold = RunFold(config.name, config.permission_mode, config.max_turns)
        self.transport: CLITransport | None = None
        self.env: dict[str, str] = {}
        self.stopped = False
        """Set when the run is cancelled or timed out: teardown then skips ``eof_grace``."""

    async def open(self) -> None:
        # W3C trace context: Claude Code (SDK/-p mode) parents its spans under TRACEPARENT/
        # TRACESTATE when its tracing is on; empty unless a tracing plugin (dsh-otel) is loaded
        trace = {k.upper(): v for k, v in self.request.parent.ctx.tracing.headers().items()}
        # the model calls go through the run's tape, when one is active (record or replay)
        self.env = through_tape(self.child_env({**env_defaults(), **trace}))
        self.env["PWD"] = self.cwd
        self.env.pop("CLAUDECODE", None)  # the child is not running inside a Claude Code parent
        child = await self.spawn(
            cli_argv(self.config, self.cli),
            what="Claude Code CLI",
            env=self.env,
            hint="set command to a claude executable, or unset it for the bundled CLI",
        )
        self.transport = CLITransport(child)

    async def turn(self) -> SubagentResult:
        transport = self.transport
        assert transport is not None
        self.stages.enter("initialize")
        asks = asks_for_permission(self.config)
        options = ClaudeAgentOptions(can_use_tool=deny_unattended if asks else None, env=self.env)
        messages = cast(
            AsyncGenerator[Message, None],
            query(prompt=self.request.prompt_text, options=options, transport=transport),
        )
        error: ClaudeSDKError | None = None
        async with contextlib.aclosing(messages):
            try:
                async for message in messages:
                    self.stages.enter("turn")
                    handle = self.handle
                    wanted = handle is not None and handle.wants_progress
                    self.fold.feed(message, handle.emit if handle is not None and wanted else None)
                    if self.budget is not None:  # (a cap reached stops the run)
                        self.report_usage(self.fold.running(), self.fold.calls)
                    if isinstance(message, ResultMessage):
                        break  # the answer is in; teardown lets the CLI exit on stdin EOF
            except ClaudeSDKError as exc:
                error = exc
        return self.fold.result(error, transport.child.exit_description())

    async def cancel(self) -> bool:
        self.stopped = True
        return self.transport is not None and await self.transport.interrupt()

    async def close(self) -> None:
        if self.child is not None:
            idle = self.fold.result_message is not None and not self.stopped
            eof_grace = self.config.eof_grace if idle else 0.0
            await self.child.terminate(eof_grace=eof_grace, term_grace=self.config.term_grace)

    def partial_output(self) -> str:
        return self.fold.partial_output()

    def usage(self) -> SubagentUsage:
        return self.fold.usage()
