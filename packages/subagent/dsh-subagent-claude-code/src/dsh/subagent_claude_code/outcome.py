"""Folding one run's SDK messages into a :class:`~dsh.subagent.SubagentResult`.

Success needs a ``success`` result that is not an error and has non-blank text.
Everything else settles ``error`` with a diagnostic for its category: the model
API failed (with the HTTP status), max turns, the CLI crashed (with its stderr
tail), tool calls were blocked by the permission policy, the result was empty,
the run timed out. Usage and cost are kept in the result whatever the outcome.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from claude_agent_sdk import (
    AssistantMessage,
    ClaudeSDKError,
    ProcessError,
    ResultMessage,
    SystemMessage,
    TextBlock,
    ToolUseBlock,
)

from dsh.subagent import SubagentResult
from dsh.subagent.diagnostics import redact_secrets

__all__ = ["RunFold"]


class RunFold:
    """Accumulates what a run said; :meth:`result` turns it into a ``SubagentResult``."""

    def __init__(self, provider: str, *, permission_mode: str, max_turns: int | None) -> None:
        self.provider = provider
        self.permission_mode = permission_mode
        self.max_turns = max_turns
        self.last_text = ""
        """The last non-empty top-level assistant text (the partial output on failure)."""
        self.api_error: str | None = None
        """Text of a synthetic assistant message reporting a model API failure."""
        self.result_message: ResultMessage | None = None
        self.denied: Counter[str] = Counter()
        """Tool name → calls the permission policy denied."""
        self.tool_calls = 0

    def feed(self, message: object) -> None:
        """Take one message from ``claude_agent_sdk.query``."""
        if isinstance(message, AssistantMessage):
            if message.parent_tool_use_id is not None:
                return  # a nested Task agent's words, not the child's answer
            self.tool_calls += sum(isinstance(b, ToolUseBlock) for b in message.content)
            text = "".join(b.text for b in message.content if isinstance(b, TextBlock)).strip()
            if message.error is not None:
                self.api_error = text or message.error
            elif text:
                self.last_text = text
        elif isinstance(message, ResultMessage):
            self.result_message = message
            if message.permission_denials:
                self.denied = Counter(_denied_tool(d) for d in message.permission_denials)
        elif isinstance(message, SystemMessage) and message.subtype == "permission_denied":
            name = message.data.get("tool_name")
            if isinstance(name, str) and self.result_message is None:
                self.denied[name] += 1

    @property
    def has_result(self) -> bool:
        """True once the CLI sent its result."""
        return self.result_message is not None

    # -- outcomes -----------------------------------------------------------------

    def usage(self) -> dict[str, Any] | None:
        """Token usage, cost (``total_cost_usd``), turns and durations of the result."""
        message = self.result_message
        if message is None:
            return None
        usage: dict[str, Any] = dict(message.usage or {})
        usage["total_cost_usd"] = message.total_cost_usd
        usage["num_turns"] = message.num_turns
        usage["duration_ms"] = message.duration_ms
        usage["duration_api_ms"] = message.duration_api_ms
        if message.model_usage:
            usage["model_usage"] = {k: dict(v) for k, v in message.model_usage.items()}
        return usage

    def result(
        self,
        *,
        error: BaseException | None = None,
        stderr: str = "",
        exit_description: str = "",
    ) -> SubagentResult:
        """The outcome once the stream ended; ``error`` is what ``query`` raised, if anything."""
        message = self.result_message
        if message is not None:
            return self._from_result(message)
        if isinstance(error, ProcessError):
            reason = f"the Claude Code CLI ended ({exit_description}) before sending a result"
        elif error is not None:
            detail = str(error) if isinstance(error, ClaudeSDKError) else repr(error)
            reason = f"lost the Claude Code CLI before a result: {detail}"
        else:
            reason = f"the Claude Code CLI ended ({exit_description}) without a result"
        if self.api_error:
            reason += f"; model API error: {self.api_error}"
        return self._failed(_with_stderr(reason, stderr))

    def timed_out(self, seconds: float, *, stderr: str = "") -> SubagentResult:
        """The run hit its ``run_timeout``."""
        reason = (
            f"no result within run_timeout ({seconds:g} s): the model stream stalled or the"
            " task is too long; the CLI was stopped"
        )
        return self._failed(_with_stderr(reason, stderr))

    def aborted(self, reason: str) -> SubagentResult:
        """The run was cancelled."""
        return SubagentResult(self.last_text, "aborted", diagnostic=reason, usage=self.usage())

    def _from_result(self, message: ResultMessage) -> SubagentResult:
        text = (message.result or "").strip()
        if message.subtype == "success" and not message.is_error:
            if text:
                return SubagentResult(
                    message.result or "",
                    "completed",
                    diagnostic=self._denials(),
                    usage=self.usage(),
                )
            return self._failed(_join("Claude Code finished with an empty result", self._denials()))
        if message.api_error_status is not None or message.terminal_reason == "api_error":
            status = f" (HTTP {message.api_error_status})" if message.api_error_status else ""
            detail = text or self.api_error or "no detail"
            return self._failed(f"model API error{status}: {detail}")
        errors = "; ".join(message.errors or [])
        if message.subtype == "error_max_turns" or message.terminal_reason == "max_turns":
            limit = f"max_turns ({self.max_turns})" if self.max_turns else "its max_turns"
            reason = f"Claude Code stopped at {limit} before finishing"
            return self._failed(_join(reason, errors, self._denials()))
        detail = errors or text or "no detail"
        reason = f"Claude Code ended with {message.subtype}"
        if message.terminal_reason:
            reason += f" ({message.terminal_reason})"
        return self._failed(_join(f"{reason}: {detail}", self._denials()))

    def _denials(self) -> str | None:
        if not self.denied:
            return None
        total = sum(self.denied.values())
        tools = ", ".join(
            f"{name} ×{count}" if count > 1 else name for name, count in self.denied.items()
        )
        return (
            f"{total} tool call{'s' if total != 1 else ''} blocked by the permission policy"
            f" (permission_mode {self.permission_mode}): {tools}"
        )

    def _failed(self, diagnostic: str) -> SubagentResult:
        return SubagentResult(
            self.last_text,
            "error",
            diagnostic=redact_secrets(f"{self.provider}: {diagnostic}"),
            usage=self.usage(),
        )


def _denied_tool(denial: Any) -> str:
    name = denial.get("tool_name") if isinstance(denial, dict) else None
    return name if isinstance(name, str) else "unknown tool"


def _join(*parts: str | None) -> str:
    return "; ".join(part for part in parts if part)


def _with_stderr(reason: str, stderr: str) -> str:
    return f"{reason}; stderr: {stderr}" if stderr else f"{reason}; stderr was empty"
