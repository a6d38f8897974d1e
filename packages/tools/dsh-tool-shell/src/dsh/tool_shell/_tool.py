"""The model-facing ``shell`` tool."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from dsh.core import Tool, ToolContext, ToolResult
from dsh.subprocess import TERMINAL_EXTENSION, Sandbox, Terminal, scrubbed_env
from dsh.tool_shell._config import ShellConfig
from dsh.tool_shell._run import CommandResult, run_command

__all__ = ["ShellArgs", "shell_tool"]

_TITLE_CHARS = 120


class ShellArgs(BaseModel):
    """Arguments of the shell tool."""

    model_config = ConfigDict(extra="forbid")

    command: str = Field(min_length=1, description="The shell command to run.")
    timeout: float | None = Field(
        None, gt=0, description="Seconds before the command is killed (default and cap: see above)."
    )


def shell_tool(config: ShellConfig) -> Tool:
    """The ``shell`` tool for ``config``."""

    def where(tctx: ToolContext) -> tuple[str, Sandbox]:
        agent = tctx.agent
        cwd = config.cwd or agent.cwd or agent.ctx.cwd
        policy = agent.sandbox.narrowed(config.sandbox, strict=False)
        allow = tuple(os.path.join(cwd, path) for path in config.allow_write)
        return cwd, Sandbox(policy, allow_write=allow)

    def argv(command: str) -> list[str]:
        return [config.shell, "-c", "exec 2>&1\n" + command]

    async def run(args: ShellArgs, tctx: ToolContext) -> ToolResult:
        cwd, sandbox = where(tctx)
        timeout = min(args.timeout or config.timeout, config.max_timeout)
        result = await run_command(
            argv(args.command),
            cwd=cwd,
            env=scrubbed_env(config.env, passthrough=config.passthrough_env),
            timeout=timeout,
            max_output_bytes=config.max_output_bytes,
            term_grace=config.term_grace,
            signal=tctx.signal,
            sandbox=sandbox,
        )
        return _to_tool_result(result, timeout)

    async def open_terminal(
        arguments: Any,
        tctx: Any,
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        output_byte_limit: int | None = None,
    ) -> Terminal:
        """The command of ``arguments`` in the background (:class:`~dsh.subprocess.Terminal`):
        the tool's shell, environment, sandbox and grace; ``cwd`` replaces the working
        directory, ``env`` adds variables, and the output kept is at most
        ``output_byte_limit`` bytes (default: the tool's ``max_output_bytes``)."""
        args = (
            arguments if isinstance(arguments, ShellArgs) else ShellArgs.model_validate(arguments)
        )
        home, sandbox = where(tctx)
        variables = scrubbed_env(config.env, passthrough=config.passthrough_env)
        variables.update(env or {})
        limit = config.max_output_bytes if output_byte_limit is None else output_byte_limit
        return await Terminal.start(
            argv(args.command),
            cwd=cwd or home,
            env=variables,
            output_byte_limit=limit,
            term_grace=config.term_grace,
            sandbox=sandbox,
            what=config.tool_name,
        )

    return Tool.from_model(
        config.tool_name,
        f"Run a shell command ({config.shell} -c) in the working directory and return its"
        " output (stdout and stderr together) and exit status. stdin is closed; the command"
        f" is killed after {config.timeout:g} s unless you pass timeout (at most"
        f" {config.max_timeout:g} s). Output over {config.max_output_bytes} bytes keeps its"
        " beginning and end around a [truncated: ...] marker. Everything the command starts"
        " is killed when it returns, so do not leave servers running in the background.",
        ShellArgs,
        run,
        concurrency_safe=False,
        permission="ask",
        kind="execute",
        title=_title,
        extensions={TERMINAL_EXTENSION: open_terminal},
    )


def _title(args: ShellArgs) -> str:
    """``Run `first line` (+N more lines)``: a title, cut where it says so; the whole
    command is in the call's arguments (approvers show it). Control characters are
    kept here and shown as escapes by :meth:`Tool.title_for` (``\\r`` is no line break)."""
    lines = args.command.strip().split("\n")
    first = lines[0]
    if len(first) > _TITLE_CHARS:
        first = first[:_TITLE_CHARS] + "…"
    more = len(lines) - 1
    return f"Run `{first}`" + (f" (+{more} more line{'s' if more > 1 else ''})" if more else "")


def _to_tool_result(result: CommandResult, timeout: float) -> ToolResult:
    data = {
        "exit_status": result.exit_status,
        "outcome": result.outcome,
        "truncated": result.truncated,
    }
    if result.outcome == "not-started":
        return ToolResult(result.reason or "the command could not be started", True, data)
    output = result.output or "(no output)"
    if result.outcome == "timeout":
        status = (
            f"[timed out after {timeout:g} s: the command and every process it started were"
            f" killed ({result.description})]"
        )
    elif result.outcome == "cancelled":
        status = (
            f"[cancelled ({result.reason or 'cancelled'}): the command and every process it"
            " started were killed]"
        )
    else:
        status = f"[{result.description}]"
    failed = result.outcome != "exited" or result.exit_status != 0
    return ToolResult(f"{output.rstrip(chr(10))}\n{status}", failed, data)
