"""One run's SDK messages folded into its result, and mapped to progress items.

Success needs a ``success`` result that is not an error and has non-blank text.
Everything else settles ``error`` with a diagnostic for its category: the model
API failed (with the HTTP status), max turns, the CLI crashed, tool calls were
blocked by the permission policy, the result was empty. Usage and cost are kept
whatever the outcome.

Progress (only while someone listens): text and thinking deltas of the child's
own messages (stream events), its tool calls and their results (nested Task
agents' too), running usage after each model call, the result's usage and cost.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from claude_agent_sdk import (
    AssistantMessage,
    ClaudeSDKError,
    ProcessError,
    ResultMessage,
    StreamEvent,
    SystemMessage,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)

from dsh.subagent import SubagentProgress, SubagentResult, SubagentUsage
from dsh.subagent.kit import redact_secrets

__all__ = ["Emit", "RunFold"]

Emit = Callable[[SubagentProgress], None]

TOOL_OUTPUT_EXCERPT = 400
"""Characters of a tool's output in its ``tool_update`` item (at most)."""


class RunFold:
    """Accumulates what a run said; :meth:`result` turns it into a ``SubagentResult``."""

    def __init__(self, provider: str, permission_mode: str, max_turns: int | None) -> None:
        self.provider = provider
        self.permission_mode = permission_mode
        self.max_turns = max_turns
        self.last_text = ""  # the last non-empty top-level assistant text
        self.api_error: str | None = None  # a synthetic assistant message's API failure
        self.result_message: ResultMessage | None = None
        self.denied: Counter[str] = Counter()  # tool name → calls the policy denied
        self._streamed: list[str] = []  # text deltas of the top-level model call under way
        self._calls: dict[str | None, dict[str, Any]] = {}  # its usage so far, per agent
        self._used = SubagentUsage()  # usage of the model calls finished so far
        self.calls = 0
        """Model calls finished so far (its Task agents' too)."""
        self._tools: dict[str, str] = {}  # tool call id → name, reported and not finished

    def feed(self, message: object, emit: Emit | None) -> None:
        """Take one message from ``claude_agent_sdk.query``; ``emit`` reports progress
        (None: nobody listens)."""
        if isinstance(message, StreamEvent):
            self._stream_event(message, emit)
        elif isinstance(message, AssistantMessage):
            self._assistant(message, emit)
        elif isinstance(message, UserMessage):
            if emit is not None and isinstance(message.content, list):
                self._tool_results(message.content, emit)
        elif isinstance(message, ResultMessage):
            self.result_message = message
            if message.permission_denials:
                self.denied = Counter(_denied_tool(d) for d in message.permission_denials)
            if emit is not None:
                emit(SubagentProgress("usage", usage=self.usage()))
        elif isinstance(message, SystemMessage) and message.subtype == "permission_denied":
            name = message.data.get("tool_name")
            if isinstance(name, str) and self.result_message is None:
                self.denied[name] += 1

    def _stream_event(self, message: StreamEvent, emit: Emit | None) -> None:
        event = message.event
        kind = event.get("type")
        agent = message.parent_tool_use_id
        if kind == "content_block_delta" and agent is None:  # not a nested Task agent's
            delta = event.get("delta") or {}
            if delta.get("type") == "text_delta" and delta.get("text"):
                self._streamed.append(str(delta["text"]))
                if emit is not None:
                    emit(SubagentProgress("text", text=str(delta["text"])))
            elif delta.get("type") == "thinking_delta" and delta.get("thinking") and emit:
                emit(SubagentProgress("thinking", text=str(delta["thinking"])))
        elif kind == "message_start":
            if agent is None:
                self._streamed.clear()
            self._calls[agent] = dict((event.get("message") or {}).get("usage") or {})
        elif kind == "message_delta":
            call = {**self._calls.pop(agent, {}), **(event.get("usage") or {})}
            self._used += _usage_of(call)
            self.calls += 1
            if emit is not None:
                emit(SubagentProgress("usage", usage=self._used))

    def _assistant(self, message: AssistantMessage, emit: Emit | None) -> None:
        if message.parent_tool_use_id is None:
            text = "".join(b.text for b in message.content if isinstance(b, TextBlock)).strip()
            if message.error is not None:
                self.api_error = text or message.error
                if emit is not None:
                    emit(SubagentProgress("notice", text=f"model API error: {self.api_error}"))
            elif text:
                self.last_text = text
        if emit is None:
            return
        for block in message.content:
            if isinstance(block, ToolUseBlock):
                self._tools[block.id] = block.name
                description = block.input.get("description")
                emit(
                    SubagentProgress(
                        "tool_call",
                        tool_call_id=block.id,
                        name=block.name,
                        title=description if isinstance(description, str) else block.name,
                        arguments=block.input,
                    )
                )

    def _tool_results(self, content: list[Any], emit: Emit) -> None:
        for block in content:
            if isinstance(block, ToolResultBlock):
                output = _text_of(block.content)
                if len(output) > TOOL_OUTPUT_EXCERPT:
                    output = output[: TOOL_OUTPUT_EXCERPT - 1] + "…"
                emit(
                    SubagentProgress(
                        "tool_update",
                        tool_call_id=block.tool_use_id,
                        name=self._tools.pop(block.tool_use_id, None),
                        status="failed" if block.is_error else "completed",
                        text=output or None,
                    )
                )

    # -- outcomes -----------------------------------------------------------------

    def partial_output(self) -> str:
        """What the child said last: the text streamed so far of the model call under
        way, else the last complete assistant text."""
        return "".join(self._streamed).strip() or self.last_text

    def running(self) -> SubagentUsage:
        """The usage of the model calls finished so far (no cost: that comes with
        the result)."""
        return self._used

    def usage(self) -> SubagentUsage:
        """The result's usage and cost; before a result, the model calls finished so far
        (``incomplete``); unknown if there were none."""
        message = self.result_message
        if message is not None and message.usage:
            return _usage_of(message.usage, message.total_cost_usd)
        if self._used.total_tokens:
            return replace(self._used, incomplete=True)
        return SubagentUsage.unknown()

    def result(self, error: BaseException | None, exit_description: str) -> SubagentResult:
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
        return self._failed(reason)

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
        return SubagentResult.failed(
            redact_secrets(f"{self.provider}: {diagnostic}"),
            output=self.partial_output(),
            usage=self.usage(),
        )


def _usage_of(usage: Mapping[str, Any], cost: float | None = None) -> SubagentUsage:
    """Anthropic usage as a ``SubagentUsage``: input counts every prompt token (cache
    reads and writes included), ``cached_input_tokens`` the cache reads."""
    cached = _count(usage, "cache_read_input_tokens")
    details = usage.get("output_tokens_details")
    thinking = details.get("thinking_tokens") if isinstance(details, Mapping) else None
    return SubagentUsage(
        input_tokens=_count(usage, "input_tokens")
        + _count(usage, "cache_creation_input_tokens")
        + cached,
        output_tokens=_count(usage, "output_tokens"),
        cached_input_tokens=cached,
        reasoning_tokens=thinking if isinstance(thinking, int) else None,
        cost_usd=cost,
    )


def _count(usage: Mapping[str, Any], key: str) -> int:
    value = usage.get(key)
    return value if isinstance(value, int) and value > 0 else 0


def _text_of(content: Any) -> str:
    if isinstance(content, list):
        content = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return content.strip() if isinstance(content, str) else ""


def _denied_tool(denial: Any) -> str:
    name = denial.get("tool_name") if isinstance(denial, dict) else None
    return name if isinstance(name, str) else "unknown tool"


def _join(*parts: str | None) -> str:
    return "; ".join(part for part in parts if part)
