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
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Literal

import anyio
from pydantic import BaseModel, ConfigDict, Field

from dsh.core._content import text_of
from dsh.core._llm import (
    ModelConfig,
    ModelDone,
    ModelError,
    ModelRequest,
    ModelStreamEvent,
    TextDelta,
    ToolCall,
    Usage,
)
from dsh.core._session import Event
from dsh.core._signals import AbortSignal

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

    reports_cost = False
    """Its usage never has a ``cost_usd`` (a ``usd`` budget is refused at start)."""

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
        self._needs: dict[int, bool] = {}
        self.requests: list[ModelRequest] = []
        """Every request received, in order (for assertions)."""
        self.record_requests = False

    async def _call_function(self, request: ModelRequest) -> ScriptedReply:
        assert self._function is not None
        outcome = self._function(request)
        if inspect.isawaitable(outcome):
            return await outcome
        return outcome

    def stream(self, request: ModelRequest, signal: AbortSignal) -> AsyncIterator[ModelStreamEvent]:
        """Yield the scripted reply for ``request``.

        A plain async iterator rather than an async generator: asyncio tracks every
        async generator in a weak set, a measurable cost on the delegation hot path.
        """
        if self.record_requests:
            self.requests.append(request)
        return _ReplyStream(self, request)

    def _pick(self, request: ModelRequest) -> ScriptedReply | None:
        """The reply from a reply list, chosen synchronously (None for a function script)."""
        if self._function is not None:
            return None
        index = self._served if self._mode == "sequence" else _step_of(request.events)
        self._served += 1
        return self._replies[min(index, len(self._replies) - 1)]

    async def _events_for(self, request: ModelRequest) -> list[ModelStreamEvent]:
        reply = self._pick(request) or await self._call_function(request)
        if reply.hang:
            await anyio.sleep_forever()
        if reply.delay:
            await anyio.sleep(reply.delay)
        if reply.error is not None:
            raise ModelError(reply.error)
        if self._function is None:  # fixed replies live as long as the adapter
            needs = self._needs.get(id(reply))
            if needs is None:
                needs = self._needs[id(reply)] = _needs_values(reply)
        else:
            needs = _needs_values(reply)
        values = _Values(request.events) if needs else None
        text = _fill(reply.text, values) if values is not None else reply.text
        events: list[ModelStreamEvent] = []
        if text:
            if reply.chunks == 1:
                events.append(TextDelta(text))
            else:
                size = max(1, -(-len(text) // reply.chunks))
                events.extend(TextDelta(text[i : i + size]) for i in range(0, len(text), size))
        for call in reply.tool_calls:
            arguments = _fill_tree(call.arguments, values) if values is not None else call.arguments
            events.append(ToolCall(f"call_{next(_call_ids)}", call.name, arguments))
        stop = reply.stop_reason or ("tool_calls" if reply.tool_calls else "end")
        events.append(ModelDone(stop, Usage(0, len(text.split()))))
        return events


class _ReplyStream:
    """The async iterator behind :meth:`ScriptedAdapter.stream`."""

    __slots__ = ("_adapter", "_events", "_request")

    def __init__(self, adapter: ScriptedAdapter, request: ModelRequest) -> None:
        self._adapter = adapter
        self._request = request
        self._events: list[ModelStreamEvent] | None = None

    def __aiter__(self) -> _ReplyStream:
        return self

    async def __anext__(self) -> ModelStreamEvent:
        if self._events is None:
            events = await self._adapter._events_for(self._request)
            events.reverse()
            self._events = events
        if not self._events:
            raise StopAsyncIteration
        return self._events.pop()


def _step_of(events: Sequence[Event]) -> int:
    """Model calls already made in the current turn (messages steered in do not reset it,
    nor does the ``turn/start`` of a cut-off turn taken up again)."""
    step = 0
    for index in range(len(events) - 1, -1, -1):
        kind = events[index].type
        if kind == "turn/start" and not events[index].data.get("resumed"):
            return step
        if kind == "assistant/message":
            step += 1
    return step


def _needs_values(reply: ScriptedReply) -> bool:
    """True if the reply's text or any string argument holds a placeholder."""
    if _TEMPLATE.search(reply.text):
        return True
    return any(_has_placeholder(call.arguments) for call in reply.tool_calls)


def _has_placeholder(value: Any) -> bool:
    if isinstance(value, str):
        return _TEMPLATE.search(value) is not None
    if isinstance(value, dict):
        return any(_has_placeholder(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_placeholder(v) for v in value)
    return False


class _Values:
    """Template values, each computed only when a placeholder asks for it."""

    __slots__ = ("_cache", "_events")

    def __init__(self, events: Sequence[Event]) -> None:
        self._events = events
        self._cache: dict[str, str] = {}

    def get(self, name: str) -> str:
        if name not in self._cache:
            self._cache[name] = getattr(self, f"_{name}")()
        return self._cache[name]

    def _prompt(self) -> str:
        for index in range(len(self._events) - 1, -1, -1):
            event = self._events[index]
            if event.type == "user/message":
                return text_of(event.data.get("content"))
        return ""

    def _tool_results(self) -> str:
        results: list[str] = []
        for index in range(len(self._events) - 1, -1, -1):
            event = self._events[index]
            if event.type in ("assistant/message", "user/message"):
                break
            if event.type == "tool/result":
                results.append(text_of(event.data.get("content")))
        results.reverse()
        return "\n".join(results)

    def _step(self) -> str:
        return str(_step_of(self._events))

    def _turns(self) -> str:
        return str(sum(1 for e in self._events if e.type == "turn/end"))


def _fill(text: str, values: _Values) -> str:
    return _TEMPLATE.sub(lambda m: values.get(m.group(1)), text)


def _fill_tree(value: Any, values: _Values) -> Any:
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
