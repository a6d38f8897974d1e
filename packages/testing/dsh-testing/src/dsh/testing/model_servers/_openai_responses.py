"""The code behind :mod:`dsh.testing.model_servers.openai_responses` (see its docstring)."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dsh.testing.model_servers._content import json_body, mappings, text_parts
from dsh.testing.model_servers._http import Exchange, RecordedRequest
from dsh.testing.model_servers._openai_chat import openai_auth_error, openai_error, split_text
from dsh.testing.model_servers._rules import ContentRule, RuleServer
from dsh.testing.model_servers._script import NO_FAULTS, StreamFaults
from dsh.testing.model_servers._sse import SSEEvent

__all__ = [
    "TOOL_OUTPUT_TYPES",
    "FunctionCall",
    "OpenAIResponsesServer",
    "ResponseFailed",
    "ResponsesReply",
    "ResponsesRule",
    "check_responses_request",
    "latest_user_input_text",
    "reply_with_tool_output",
    "tool_outputs",
    "tool_step",
]

TOOL_OUTPUT_TYPES = frozenset(
    {"function_call_output", "custom_tool_call_output", "local_shell_call_output"}
)
"""Input item types that carry a tool's output back to the model."""

_CALL_TYPES = frozenset({"function_call", "custom_tool_call", "local_shell_call"})
_ROLES = frozenset({"user", "assistant", "system", "developer"})


@dataclass(frozen=True, slots=True)
class FunctionCall:
    """A ``function_call`` output item in a scripted reply.

    ``arguments`` as a mapping is sent as JSON; a ``str`` is sent verbatim.
    ``call_id`` defaults to a fresh ``call_fake_<n>``.
    """

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    call_id: str | None = None
    namespace: str | None = None
    """The namespace of a tool the client offered in one (Codex's MCP tools)."""


@dataclass(frozen=True, slots=True)
class ResponsesReply:
    """One scripted response: a text message and/or function calls (in that order)."""

    text: str = ""
    function_calls: Sequence[FunctionCall] = ()
    items: Sequence[Mapping[str, Any]] = ()
    """Other output items, sent as they are after the calls (e.g. Codex's
    ``tool_search_call``: ``{"type": "tool_search_call", "call_id": ..., "execution":
    "client", "arguments": {"query": ...}, "status": "completed"}``)."""
    usage: Mapping[str, int] | None = None
    """``input_tokens`` / ``output_tokens`` (others derived); default: word counts."""
    text_chunks: int = 3
    """Stream the text in this many ``response.output_text.delta`` events."""
    argument_chunks: int = 2
    """Stream each call's arguments in this many deltas."""
    faults: StreamFaults = NO_FAULTS
    """Break the stream: ``hang_after`` stalls mid-stream, ``reset_after`` resets,
    ``close_after`` ends the body early, ``delay`` slows every event."""


@dataclass(frozen=True, slots=True)
class ResponseFailed:
    """Script item: HTTP 200, ``response.created``, then ``response.failed`` with this error."""

    message: str = "scripted response.failed"
    code: str = "server_error"


class ResponsesRule(ContentRule):
    """Answer requests matching ``match`` with ``replies`` (picked by tool step).

    ``match`` is a substring of (or a regex searched in) the latest user input
    text, or a predicate of the request.
    """

    __slots__ = ()

    def prompt_text(self, request: RecordedRequest) -> str:
        """:func:`latest_user_input_text`."""
        return latest_user_input_text(request)

    def tool_step(self, request: RecordedRequest) -> int:
        """:func:`tool_step`: tool outputs after the latest user message."""
        return tool_step(request)


def _input_items(request: RecordedRequest) -> list[Mapping[str, Any]]:
    items = json_body(request).get("input")
    if isinstance(items, str):
        return [{"type": "message", "role": "user", "content": items}]
    return mappings(items)


def _is_user_message(item: Mapping[str, Any]) -> bool:
    return item.get("role") == "user" and item.get("type", "message") == "message"


def _text_of(content: Any) -> str:
    return text_parts(content, ("input_text", "text"))


def _latest_user_index(items: Sequence[Mapping[str, Any]]) -> int:
    for index in range(len(items) - 1, -1, -1):
        if _is_user_message(items[index]):
            return index
    return -1


def latest_user_input_text(request: RecordedRequest) -> str:
    """The text of the latest user message in a Responses request's ``input``."""
    items = _input_items(request)
    at = _latest_user_index(items)
    return _text_of(items[at].get("content")) if at >= 0 else ""


def tool_outputs(request: RecordedRequest) -> list[str]:
    """The outputs of the tool calls answered since the latest user message, in order."""
    items = _input_items(request)
    outputs: list[str] = []
    for item in items[_latest_user_index(items) + 1 :]:
        if item.get("type") in TOOL_OUTPUT_TYPES:
            output = item.get("output")
            outputs.append(output if isinstance(output, str) else json.dumps(output))
    return outputs


def tool_step(request: RecordedRequest) -> int:
    """How many tool outputs follow the latest user message (0 for a fresh turn)."""
    return len(tool_outputs(request))


def reply_with_tool_output(
    template: str = "Tool said: {output}",
) -> Callable[[RecordedRequest], ResponsesReply]:
    """A script item answering ``template`` filled with the last tool output."""

    def reply(request: RecordedRequest) -> ResponsesReply:
        outputs = tool_outputs(request)
        return ResponsesReply(text=template.format(output=outputs[-1] if outputs else ""))

    return reply


class OpenAIResponsesServer(RuleServer[ResponsesRule]):
    """Fake ``POST /v1/responses`` (also ``/responses``). See the module docstring.

    With ``strict`` (default) requests the real API rejects get HTTP 400 in
    OpenAI's error shape: no model, no input, a tool output answering no call.
    With ``api_key`` set, a missing or wrong bearer token gets 401.
    """

    def __init__(
        self,
        *script: Any,
        default: Any = None,
        rules: Sequence[ResponsesRule] = (),
        api_key: str | None = None,
        strict: bool = True,
    ) -> None:
        super().__init__(
            *script,
            default=default,
            rules=rules,
            rule_type=ResponsesRule,
            paths=["/v1/responses", "/responses"],
        )
        self.api_key = api_key
        self.strict = strict
        self._ids = itertools.count(1)

    @property
    def api_base(self) -> str:
        """The base URL a client appends ``/responses`` to (``.../v1``)."""
        return self.base_url + "/v1"

    def error_body(self, status: int, message: str) -> Any:
        """OpenAI's error shape."""
        return openai_error(status, message)

    def reject(self, request: RecordedRequest) -> tuple[int, Any] | None:
        """401 without the bearer key (when ``api_key`` is set); 400 for what the API rejects."""
        denied = openai_auth_error(request, self.api_key)
        if denied is not None:
            return 401, denied
        problem = check_responses_request(request.json) if self.strict else None
        return None if problem is None else (400, openai_error(400, problem))

    async def render(self, item: Any, exchange: Exchange) -> None:
        """Answer with a :class:`ResponsesReply`, a ``str`` or a :class:`ResponseFailed`."""
        if isinstance(item, str):
            item = ResponsesReply(text=item)
        body = json_body(exchange.request)
        response_id = f"resp_fake{next(self._ids)}"
        if isinstance(item, ResponseFailed):
            await self._render_failed(item, body, response_id, exchange)
            return
        if not isinstance(item, ResponsesReply):
            raise TypeError(f"OpenAIResponsesServer cannot render a {type(item).__name__}")
        output = self._output_items(item)
        if body.get("stream"):
            await exchange.stream(_events(item, body, response_id, output), item.faults)
        else:
            done = _response(body, response_id, "completed", output, _usage(item, body))
            await exchange.send_json_faulted(200, done, item.faults)

    def _output_items(self, reply: ResponsesReply) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        if reply.text:
            items.append(
                {
                    "id": f"msg_fake{next(self._ids)}",
                    "type": "message",
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
                }
            )
        for call in reply.function_calls:
            arguments = call.arguments
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments, separators=(",", ":"))
            item = {
                "id": f"fc_fake{next(self._ids)}",
                "type": "function_call",
                "status": "completed",
                "name": call.name,
                "call_id": call.call_id or f"call_fake_{next(self._ids)}",
                "arguments": arguments,
            }
            if call.namespace is not None:
                item["namespace"] = call.namespace
            items.append(item)
        for raw in reply.items:
            items.append({"id": f"item_fake{next(self._ids)}", **raw})
        return items

    async def _render_failed(
        self, item: ResponseFailed, body: Mapping[str, Any], response_id: str, exchange: Exchange
    ) -> None:
        failed = _response(body, response_id, "failed", [], None)
        failed["error"] = {"code": item.code, "message": item.message}
        if not body.get("stream"):
            await exchange.send_json(200, failed)
            return
        sequence = itertools.count()
        created = _response(body, response_id, "in_progress", [], None)
        await exchange.stream(
            [
                _event("response.created", sequence, response=created),
                _event("response.failed", sequence, response=failed),
            ]
        )


def _event(kind: str, sequence: itertools.count[int], **data: Any) -> SSEEvent:
    return SSEEvent({"type": kind, "sequence_number": next(sequence), **data}, event=kind)


def _response(
    body: Mapping[str, Any],
    response_id: str,
    status: str,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None,
) -> dict[str, Any]:
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "error": None,
        "incomplete_details": None,
        "model": str(body.get("model") or "fake-model"),
        "output": output,
        "parallel_tool_calls": bool(body.get("parallel_tool_calls", True)),
        "usage": usage,
    }


def _events(
    reply: ResponsesReply,
    body: Mapping[str, Any],
    response_id: str,
    output: list[dict[str, Any]],
) -> list[SSEEvent]:
    seq = itertools.count()
    events = [
        _event(
            "response.created", seq, response=_response(body, response_id, "in_progress", [], None)
        ),
        _event(
            "response.in_progress",
            seq,
            response=_response(body, response_id, "in_progress", [], None),
        ),
    ]
    for index, item in enumerate(output):
        if item["type"] == "message":
            events += _message_events(item, index, seq, reply.text_chunks)
        elif item["type"] == "function_call":
            events += _call_events(item, index, seq, reply.argument_chunks)
        else:
            events += [
                _event("response.output_item.added", seq, output_index=index, item=item),
                _event("response.output_item.done", seq, output_index=index, item=item),
            ]
    done = _response(body, response_id, "completed", output, _usage(reply, body))
    events.append(_event("response.completed", seq, response=done))
    return events


def _message_events(
    item: dict[str, Any], index: int, seq: itertools.count[int], chunks: int
) -> list[SSEEvent]:
    text = item["content"][0]["text"]
    where = {"item_id": item["id"], "output_index": index, "content_index": 0}
    opened = {**item, "status": "in_progress", "content": []}
    empty_part = {"type": "output_text", "text": "", "annotations": []}
    events = [
        _event("response.output_item.added", seq, output_index=index, item=opened),
        _event("response.content_part.added", seq, **where, part=empty_part),
    ]
    events += [
        _event("response.output_text.delta", seq, **where, delta=piece, logprobs=[])
        for piece in split_text(text, chunks)
    ]
    events += [
        _event("response.output_text.done", seq, **where, text=text, logprobs=[]),
        _event("response.content_part.done", seq, **where, part=item["content"][0]),
        _event("response.output_item.done", seq, output_index=index, item=item),
    ]
    return events


def _call_events(
    item: dict[str, Any], index: int, seq: itertools.count[int], chunks: int
) -> list[SSEEvent]:
    arguments = item["arguments"]
    where = {"item_id": item["id"], "output_index": index}
    events = [
        _event(
            "response.output_item.added",
            seq,
            output_index=index,
            item={**item, "status": "in_progress", "arguments": ""},
        )
    ]
    events += [
        _event("response.function_call_arguments.delta", seq, **where, delta=piece)
        for piece in split_text(arguments, chunks)
    ]
    events += [
        _event("response.function_call_arguments.done", seq, **where, arguments=arguments),
        _event("response.output_item.done", seq, output_index=index, item=item),
    ]
    return events


def _usage(reply: ResponsesReply, body: Mapping[str, Any]) -> dict[str, Any]:
    if reply.usage is not None:
        prompt = int(reply.usage.get("input_tokens", 0))
        completion = int(reply.usage.get("output_tokens", 0))
        cached = int(reply.usage.get("cached_tokens", 0))
        reasoning = int(reply.usage.get("reasoning_tokens", 0))
    else:
        items = body.get("input")
        words = 0
        if isinstance(items, str):
            words = len(items.split())
        elif isinstance(items, list):
            for item in items:
                if isinstance(item, Mapping):
                    words += len(_text_of(item.get("content")).split())
                    output = item.get("output")
                    if isinstance(output, str):
                        words += len(output.split())
        prompt, cached, reasoning = words, 0, 0
        completion = len(reply.text.split()) + sum(
            max(1, len(str(c.arguments)) // 4) for c in reply.function_calls
        )
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": prompt + completion,
    }


def check_responses_request(body: Any) -> str | None:
    """What the real API would reject in a Responses request ``body`` (None: acceptable)."""
    if not isinstance(body, Mapping):
        return "We could not parse the JSON body of your request."
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "Missing required parameter: 'model'."
    items = body.get("input")
    if isinstance(items, str):
        return None if items else "Invalid 'input': empty string."
    if not isinstance(items, list) or not items:
        return "Missing required parameter: 'input'."
    calls: set[str] = set()
    for index, item in enumerate(items):
        if not isinstance(item, Mapping):
            return f"Invalid 'input[{index}]': expected an object."
        kind = item.get("type", "message")
        if kind == "message" and item.get("role") not in _ROLES:
            return f"Invalid 'input[{index}].role': {item.get('role')!r}."
        if kind in _CALL_TYPES:
            call_id = item.get("call_id")
            if isinstance(call_id, str):
                calls.add(call_id)
        elif kind in TOOL_OUTPUT_TYPES and item.get("call_id") not in calls:
            call_id = item.get("call_id")
            return f"No tool call found for function call output with call_id {call_id}."
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        return "Invalid 'tools': expected an array."
    return None
