"""A deterministic scripted model adapter (tests, offline demos, benchmarks).

The script is a list of replies. By default the reply for a call is chosen by the
*step* within the current turn: the first model call of a turn gets
``replies[0]``, the call after its tool results gets ``replies[1]``, and so on;
the last reply repeats. With ``mode = "sequence"`` replies are consumed in order
across all calls instead.

Reply text and string tool arguments may use ``{prompt}`` (the text of the last
user message), ``{tool_results}`` (the texts of the tool results since the last
assistant message, one per line), ``{step}`` and ``{turns}`` (completed turns
visible in the request: a forked child sees its parent's).

From a preset::

    [agent.model]
    adapter = "scripted"
    [[agent.model.options.replies]]
    tool_calls = [{ name = "subagent", arguments = { description = "d", prompt = "p" } }]
    [[agent.model.options.replies]]
    text = "Child said: {tool_results}"
"""

from __future__ import annotations

import inspect
import itertools
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal

import anyio
from pydantic import BaseModel, ConfigDict, Field

from dsh.core.content import text_of
from dsh.core.llm import (
    ModelConfig,
    ModelDone,
    ModelError,
    ModelRequest,
    ModelStreamEvent,
    TextDelta,
    ToolCall,
    Usage,
)
from dsh.core.session import Event
from dsh.core.signals import AbortSignal

__all__ = [
    "ScriptFunction",
    "ScriptedAdapter",
    "ScriptedModelOptions",
    "ScriptedReply",
    "ScriptedToolCall",
    "scripted_factory",
]


class ScriptedToolCall(BaseModel):
    """A tool call the scripted model makes."""

    model_config = ConfigDict(extra="forbid")

    name: str
    arguments: dict[str, Any] = {}


class ScriptedReply(BaseModel):
    """One scripted model response."""

    model_config = ConfigDict(extra="forbid")

    text: str = ""
    tool_calls: list[ScriptedToolCall] = []
    stop_reason: Literal["end", "max-tokens", "refusal"] | None = None
    """Default: ``tool_calls`` when there are calls, else ``end``."""
    delay: float = Field(0.0, ge=0)
    """Seconds to wait before answering (a slow model)."""
    hang: bool = False
    """Never answer (until cancelled)."""
    error: str | None = None
    """Fail the call with this message (a :class:`ModelError`)."""
    chunks: int = Field(1, ge=1)
    """Stream the text in this many pieces."""


class ScriptedModelOptions(BaseModel):
    """Options of the ``scripted`` adapter."""

    model_config = ConfigDict(extra="forbid")

    replies: list[ScriptedReply] = [ScriptedReply(text="Done: {prompt}")]
    mode: Literal["per-step", "sequence"] = "per-step"


ScriptFunction = Callable[[ModelRequest], ScriptedReply | Awaitable[ScriptedReply]]

_TEMPLATE = re.compile(r"\{(prompt|tool_results|step|turns)\}")
_call_ids = itertools.count(1)


class ScriptedAdapter:
    """Answers from a script: a list of :class:`ScriptedReply` or a function."""

    def __init__(
        self,
        script: Sequence[ScriptedReply] | ScriptFunction | None = None,
        *,
        mode: Literal["per-step", "sequence"] = "per-step",
    ) -> None:
        if script is None:
            script = ScriptedModelOptions().replies
        if callable(script):
            self._function: ScriptFunction | None = script
            self._replies: Sequence[ScriptedReply] = ()
        else:
            if not script:
                raise ValueError("a scripted model needs at least one reply")
            self._function = None
            self._replies = list(script)
        self._mode = mode
        self._served = 0
        self.requests: list[ModelRequest] = []
        """Every request received, in order (for assertions)."""
        self.record_requests = False

    async def _reply_for(self, request: ModelRequest) -> ScriptedReply:
        if self._function is not None:
            outcome = self._function(request)
            if inspect.isawaitable(outcome):
                return await outcome
            return outcome
        index = self._served if self._mode == "sequence" else _step_of(request.events)
        self._served += 1
        return self._replies[min(index, len(self._replies) - 1)]

    async def stream(
        self, request: ModelRequest, signal: AbortSignal
    ) -> AsyncIterator[ModelStreamEvent]:
        """Yield the scripted reply for ``request``."""
        if self.record_requests:
            self.requests.append(request)
        reply = await self._reply_for(request)
        if reply.hang:
            await anyio.sleep_forever()
        if reply.delay:
            await anyio.sleep(reply.delay)
        if reply.error is not None:
            raise ModelError(reply.error)
        needs_values = "{" in reply.text or any(
            "{" in str(call.arguments) for call in reply.tool_calls
        )
        values = _template_values(request.events) if needs_values else {}
        text = _fill(reply.text, values) if values else reply.text
        if text:
            if reply.chunks == 1:
                yield TextDelta(text)
            else:
                size = max(1, -(-len(text) // reply.chunks))
                for start in range(0, len(text), size):
                    yield TextDelta(text[start : start + size])
        for call in reply.tool_calls:
            arguments = _fill_tree(call.arguments, values) if values else call.arguments
            yield ToolCall(f"call_{next(_call_ids)}", call.name, arguments)
        stop = reply.stop_reason or ("tool_calls" if reply.tool_calls else "end")
        yield ModelDone(stop, Usage(0, len(text.split())))


def _step_of(events: Sequence[Event]) -> int:
    """Model calls already made in the current turn (messages steered in do not reset it)."""
    step = 0
    for index in range(len(events) - 1, -1, -1):
        kind = events[index].type
        if kind == "turn/start":
            return step
        if kind == "assistant/message":
            step += 1
    return step


def _template_values(events: Sequence[Event]) -> dict[str, str]:
    prompt = ""
    results: list[str] = []
    collecting = True
    for index in range(len(events) - 1, -1, -1):
        event = events[index]
        if event.type == "user/message":
            prompt = text_of(event.data.get("content"))
            break
        if event.type == "assistant/message":
            collecting = False
        elif collecting and event.type == "tool/result":
            results.append(text_of(event.data.get("content")))
    results.reverse()
    turns = sum(1 for e in events if e.type == "turn/end")
    return {
        "prompt": prompt,
        "tool_results": "\n".join(results),
        "step": str(_step_of(events)),
        "turns": str(turns),
    }


def _fill(text: str, values: Mapping[str, str]) -> str:
    return _TEMPLATE.sub(lambda m: values.get(m.group(1), m.group(0)), text)


def _fill_tree(value: Any, values: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        return _fill(value, values)
    if isinstance(value, dict):
        return {k: _fill_tree(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill_tree(v, values) for v in value]
    return value


def scripted_factory(config: ModelConfig) -> ScriptedAdapter:
    """Adapter factory for ``adapter = "scripted"``; options per :class:`ScriptedModelOptions`."""
    try:
        options = ScriptedModelOptions.model_validate(config.options)
    except ValueError as exc:
        raise ValueError(f"invalid scripted model options: {exc}") from exc
    return ScriptedAdapter(options.replies, mode=options.mode)
