"""Reading a chat-completions stream: SSE lines -> chunks -> dsh stream events.

:class:`SSELines` turns response lines into event data; :class:`ChunkAssembler`
turns chunk JSON into :class:`TextDelta` events as they arrive, assembles tool
calls from their deltas (by ``index``; ids and names come in the first delta,
arguments in pieces) and, at the end, yields the complete :class:`ToolCall`
objects and one :class:`ModelDone` with the mapped stop reason and usage.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dsh.core import Usage
from dsh.core.models import ModelDone, ModelError, ModelStopReason, TextDelta, ToolCall

__all__ = ["STOP_REASONS", "ChunkAssembler", "SSELines", "error_detail"]

STOP_REASONS: Mapping[str, ModelStopReason] = {
    "stop": "end",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "length": "max-tokens",
    "content_filter": "refusal",
}
"""``finish_reason`` -> dsh stop reason (anything else: ``end``, or ``tool_calls``
when the response has calls)."""

_FAILED = {"insufficient_system_resource", "error"}


def error_detail(error: Any) -> str:
    """The human part of an API error object (``{"message": ...}``, a string, ...)."""
    if isinstance(error, Mapping):
        for key in ("message", "detail", "error"):
            value = error.get(key)
            if isinstance(value, str) and value:
                return value
            if isinstance(value, Mapping):
                return error_detail(value)
        return json.dumps(error)[:500]
    return str(error)[:500]


class SSELines:
    """Incremental SSE parser: feed lines (:meth:`feed`) or text as it arrives
    (:meth:`feed_text`), get the ``data`` of each complete event."""

    __slots__ = ("_cr", "_data", "_partial")

    def __init__(self) -> None:
        self._data: list[str] = []
        self._partial = ""
        """The start of a line whose end has not arrived yet (:meth:`feed_text`)."""
        self._cr = False
        """The last text ended with CR: an LF starting the next one ends no line."""

    def feed_text(self, text: str) -> list[str]:
        """Take a piece of the stream's text (any size: a network chunk, or a whole
        replayed body); return the data of the events it completes. Lines end with
        CR, LF or CRLF, as SSE says (other Unicode line breaks are data)."""
        if self._cr:
            self._cr = False
            if text.startswith("\n"):
                text = text[1:]
        text = self._partial + text
        if "\r" in text:
            self._cr = text.endswith("\r")
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        lines = text.split("\n")
        self._partial = lines.pop()
        events: list[str] = []
        for line in lines:
            data = self.feed(line)
            if data is not None:
                events.append(data)
        return events

    def feed(self, line: str) -> str | None:
        """Take one line (without its ending); return event data when one completes."""
        if not line:
            return self._complete()
        if line.startswith(":"):
            return None  # a comment (keep-alive)
        name, _, value = line.partition(":")
        if name == "data":
            self._data.append(value.removeprefix(" "))
        return None

    def flush(self) -> str | None:
        """The data of a pending event (at end of stream), if any."""
        if self._partial:  # (a last line with no line end)
            line, self._partial = self._partial, ""
            self.feed(line)
        return self._complete()

    def _complete(self) -> str | None:
        """The data of the event that an empty line ends (None: no data)."""
        if not self._data:
            return None
        data = "\n".join(self._data)
        self._data.clear()
        return data


@dataclass(slots=True)
class _Call:
    id: str = ""
    name: str = ""
    arguments: str = ""
    parsed: dict[str, Any] | None = None


class ChunkAssembler:
    """Accumulates one streamed (or non-streamed) chat completion."""

    def __init__(self) -> None:
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self.done = False
        """``data: [DONE]`` was seen."""
        self._calls: dict[int, _Call] = {}
        self._refused = False

    # -- streamed -------------------------------------------------------------------

    def feed(self, data: str) -> list[TextDelta]:
        """Take the data of one SSE event; return the text it adds."""
        if data.strip() == "[DONE]":
            self.done = True
            return []
        if self.done:
            return []
        try:
            chunk = json.loads(data)
        except ValueError:
            raise ModelError(
                f"malformed stream: an event is not valid JSON: {data[:200]!r}"
            ) from None
        if not isinstance(chunk, Mapping):
            raise ModelError(f"malformed stream: an event is not a JSON object: {data[:200]!r}")
        if chunk.get("error"):
            raise ModelError(
                f"the server reported an error mid-stream: {error_detail(chunk['error'])}"
            )
        self._take_usage(chunk.get("usage"))
        choices = chunk.get("choices") or []
        if not isinstance(choices, list):
            raise ModelError(f"malformed stream: 'choices' is not a list: {data[:200]!r}")
        out: list[TextDelta] = []
        for choice in choices:
            if not isinstance(choice, Mapping) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            if isinstance(delta, Mapping):
                self._take_message(delta, out)
            finish = choice.get("finish_reason")
            if isinstance(finish, str) and finish:
                self.finish_reason = finish
        return out

    # -- non-streamed ---------------------------------------------------------------

    def feed_completion(self, completion: Any) -> list[TextDelta]:
        """Take a whole ``chat.completion`` object (a server that ignored ``stream``)."""
        if not isinstance(completion, Mapping):
            raise ModelError("malformed response: the completion is not a JSON object")
        if completion.get("error"):
            raise ModelError(f"the server reported an error: {error_detail(completion['error'])}")
        choices = completion.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
            raise ModelError("malformed response: the completion has no choices")
        self._take_usage(completion.get("usage"))
        out: list[TextDelta] = []
        message = choices[0].get("message")
        if isinstance(message, Mapping):
            self._take_message(message, out, whole=True)
        self.finish_reason = str(choices[0].get("finish_reason") or "stop")
        self.done = True
        return out

    # -- parts ----------------------------------------------------------------------

    def _take_message(
        self, delta: Mapping[str, Any], out: list[TextDelta], *, whole: bool = False
    ) -> None:
        content = delta.get("content")
        if isinstance(content, str) and content:
            out.append(TextDelta(content))
        refusal = delta.get("refusal")
        if isinstance(refusal, str) and refusal:
            self._refused = True
            out.append(TextDelta(refusal))
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            for position, part in enumerate(calls):
                if isinstance(part, Mapping):
                    self._take_call(part, position if whole else None)

    def _take_call(self, part: Mapping[str, Any], position: int | None) -> None:
        index = part.get("index", position)
        call_id = part.get("id")
        if not isinstance(index, int):
            # Some servers leave out ``index``: a new id starts a new call.
            last = max(self._calls, default=-1)
            fresh = call_id and (last < 0 or self._calls[last].id not in ("", call_id))
            index = last + 1 if fresh or last < 0 else last
        call = self._calls.setdefault(index, _Call())
        if isinstance(call_id, str) and call_id:
            call.id = call_id
        function = part.get("function")
        if not isinstance(function, Mapping):
            return
        name = function.get("name")
        if isinstance(name, str) and name and name != call.name:
            call.name = name if not call.name else call.name + name
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            call.arguments += arguments
        elif isinstance(arguments, Mapping):
            call.parsed = dict(arguments)

    def _take_usage(self, usage: Any) -> None:
        if isinstance(usage, Mapping):
            self.usage = Usage(
                int(usage.get("prompt_tokens") or 0),
                int(usage.get("completion_tokens") or 0),
                _cached_tokens(usage),
            )

    # -- the end --------------------------------------------------------------------

    def finish(self) -> list[ToolCall | ModelDone]:
        """The complete tool calls and the final :class:`ModelDone`.

        Raises :class:`ModelError` for a stream cut short, a server-side failure,
        or tool-call arguments that are not a JSON object (unless the response was
        cut by the token limit, when such incomplete calls are dropped).
        """
        reason = self.finish_reason
        if reason is None and not self.done:
            raise ModelError(
                "the stream ended before the response was complete (no finish_reason, no [DONE])"
            )
        if reason in _FAILED:
            raise ModelError(f"the server could not finish the response (finish_reason {reason!r})")
        stop: ModelStopReason = STOP_REASONS.get(reason or "stop", "end")
        calls: list[ToolCall] = []
        for index in sorted(self._calls):
            call = self._calls[index]
            try:
                arguments = _arguments(call)
            except ValueError as exc:
                if stop == "max-tokens":
                    continue
                raise ModelError(
                    f'the model sent invalid arguments for tool "{call.name}" (call {call.id}):'
                    f" {exc}; arguments were {call.arguments[:200]!r}"
                ) from None
            if not call.name:
                raise ModelError(f"the model sent a tool call without a name (call {call.id})")
            calls.append(ToolCall(call.id or f"call_{uuid.uuid4().hex[:24]}", call.name, arguments))
        if calls and stop == "end":
            stop = "tool_calls"
        elif not calls and stop == "tool_calls":
            stop = "end"
        if self._refused and stop == "end":
            stop = "refusal"
        return [*calls, ModelDone(stop, self.usage)]


def _cached_tokens(usage: Mapping[str, Any]) -> int | None:
    """Prompt tokens read from the cache: OpenAI's ``prompt_tokens_details.cached_tokens``
    or DeepSeek's ``prompt_cache_hit_tokens``; None when the server says neither."""
    details = usage.get("prompt_tokens_details")
    raw = details.get("cached_tokens") if isinstance(details, Mapping) else None
    if raw is None:
        raw = usage.get("prompt_cache_hit_tokens")
    if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0:
        return raw
    return None


def _arguments(call: _Call) -> dict[str, Any]:
    if call.parsed is not None:
        return call.parsed
    text = call.arguments.strip()
    if not text:
        return {}
    value = json.loads(text)  # ValueError when invalid
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object, got {type(value).__name__}")
    return value
