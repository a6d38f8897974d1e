"""The code behind :mod:`dsh.testing.model_servers.openai_chat` (its docstring says what it is)."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dsh.testing.model_servers._content import json_body, text_parts
from dsh.testing.model_servers._http import Exchange, RecordedRequest
from dsh.testing.model_servers._script import NO_FAULTS, StreamFaults
from dsh.testing.model_servers._server import FakeServer
from dsh.testing.model_servers._sse import SSE_DONE, SSEEvent

__all__ = [
    "ChatReply",
    "ChatToolCall",
    "OpenAIChatServer",
    "check_request",
    "echo_last_user_message",
    "last_user_text",
    "openai_auth_error",
    "openai_error",
    "split_text",
]

_ROLES = {"system", "developer", "user", "assistant", "tool"}
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
}


@dataclass(frozen=True, slots=True)
class ChatToolCall:
    """A tool call in a scripted reply.

    ``arguments`` as a mapping is sent as JSON; a ``str`` is sent verbatim (so
    invalid JSON can be scripted). ``id`` defaults to a fresh ``call_fake_<n>``.
    """

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    id: str | None = None


@dataclass(frozen=True, slots=True)
class ChatReply:
    """One scripted chat completion."""

    text: str = ""
    tool_calls: Sequence[ChatToolCall] = ()
    finish_reason: str | None = None
    """Default: ``tool_calls`` when there are calls, else ``stop``."""
    reasoning: str = ""
    """DeepSeek-style ``reasoning_content``, streamed before the text."""
    usage: Mapping[str, int] | None = None
    """``prompt_tokens`` / ``completion_tokens``; default: word counts."""
    text_chunks: int = 3
    """Stream the text (and the reasoning) in this many deltas."""
    argument_chunks: int = 3
    """Stream each call's arguments in this many deltas."""
    usage_with_finish: bool = False
    """Put the usage on the finish chunk instead of a separate last chunk."""
    faults: StreamFaults = NO_FAULTS
    """Break the stream (or the JSON answer): delays, resets, hangs, garbage."""


def split_text(text: str, parts: int) -> list[str]:
    """``text`` in ``parts`` contiguous non-empty pieces (fewer if it is shorter)."""
    if not text:
        return []
    parts = max(1, min(parts, len(text)))
    size, extra = divmod(len(text), parts)
    pieces: list[str] = []
    start = 0
    for index in range(parts):
        end = start + size + (1 if index < extra else 0)
        pieces.append(text[start:end])
        start = end
    return pieces


def openai_error(status: int, message: str, *, code: str | None = None) -> dict[str, Any]:
    """An error body in OpenAI's shape: ``{"error": {message, type, param, code}}``."""
    kind = _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def openai_auth_error(request: RecordedRequest, api_key: str | None) -> dict[str, Any] | None:
    """OpenAI's 401 body when ``api_key`` is set and ``request`` does not carry it as
    ``Authorization: Bearer <api_key>``; None when the request may pass."""
    if api_key is None or request.header("authorization") == f"Bearer {api_key}":
        return None
    message = "Incorrect API key provided. You can find your API key in your dashboard."
    return openai_error(401, message, code="invalid_api_key")


def _content_text(content: Any) -> str:
    return text_parts(content, None, sep="")


def last_user_text(request: RecordedRequest) -> str:
    """The text of the last ``user`` message of a chat-completions request."""
    body = json_body(request)
    for message in reversed(body.get("messages") or []):
        if isinstance(message, Mapping) and message.get("role") == "user":
            return _content_text(message.get("content"))
    return ""


def echo_last_user_message(prefix: str = "") -> Callable[[RecordedRequest], ChatReply]:
    """A script item answering ``prefix`` + the last user message's text."""

    def reply(request: RecordedRequest) -> ChatReply:
        return ChatReply(text=prefix + last_user_text(request))

    return reply


class OpenAIChatServer(FakeServer):
    """Fake ``POST /v1/chat/completions`` (also ``/chat/completions``, as DeepSeek)."""

    def __init__(
        self,
        *script: Any,
        default: Any = None,
        api_key: str | None = None,
        strict: bool = True,
    ) -> None:
        super().__init__(*script, default=default)
        self.api_key = api_key
        """When set, requests must carry ``Authorization: Bearer <api_key>``."""
        self.strict = strict
        """Reject malformed requests with HTTP 400 as the real API does."""
        self._ids = itertools.count(1)
        for path in ("/v1/chat/completions", "/chat/completions"):
            self.route("POST", path, self._completions)

    @property
    def api_base(self) -> str:
        """The base URL a client appends ``/chat/completions`` to (``.../v1``)."""
        return self.base_url + "/v1"

    def error_body(self, status: int, message: str) -> Any:
        """OpenAI's error shape."""
        return openai_error(status, message)

    async def _completions(self, exchange: Exchange) -> None:
        request = exchange.request
        denied = openai_auth_error(request, self.api_key)
        if denied is not None:
            await exchange.send_json(401, denied)
            return
        problem = check_request(request.json) if self.strict else None
        if problem is not None:
            await exchange.send_json(400, openai_error(400, problem))
            return
        await self.respond_scripted(exchange)

    async def render(self, item: Any, exchange: Exchange) -> None:
        """Answer with a :class:`ChatReply` (or a ``str``: a text reply)."""
        if isinstance(item, str):
            item = ChatReply(text=item)
        if not isinstance(item, ChatReply):
            raise TypeError(f"OpenAIChatServer cannot render a {type(item).__name__}")
        body = json_body(exchange.request)
        calls = [(call.id or f"call_fake_{next(self._ids)}", call) for call in item.tool_calls]
        completion_id = f"chatcmpl-fake{next(self._ids)}"
        if body.get("stream"):
            events = _chunks(item, body, calls, completion_id)
            await exchange.stream(events, item.faults)
        else:
            await exchange.send_json_faulted(
                200, _completion(item, body, calls, completion_id), item.faults
            )


def _arguments(call: ChatToolCall) -> str:
    if isinstance(call.arguments, str):
        return call.arguments
    return json.dumps(call.arguments, separators=(",", ":"))


def _finish(reply: ChatReply) -> str:
    return reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")


def _usage(reply: ChatReply, body: Mapping[str, Any]) -> dict[str, int]:
    if reply.usage is not None:
        prompt = int(reply.usage.get("prompt_tokens", 0))
        completion = int(reply.usage.get("completion_tokens", 0))
    else:
        messages = body.get("messages") or []
        prompt = sum(
            len(_content_text(m.get("content")).split()) for m in messages if isinstance(m, Mapping)
        )
        completion = len(reply.text.split()) + len(reply.reasoning.split())
        completion += sum(max(1, len(_arguments(c)) // 4) for c in reply.tool_calls)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _head(body: Mapping[str, Any], completion_id: str, kind: str) -> dict[str, Any]:
    return {
        "id": completion_id,
        "object": kind,
        "created": int(time.time()),
        "model": str(body.get("model") or "fake-model"),
        "system_fingerprint": "fp_fake",
    }


def _chunks(
    reply: ChatReply,
    body: Mapping[str, Any],
    calls: Sequence[tuple[str, ChatToolCall]],
    completion_id: str,
) -> list[SSEEvent]:
    options = body.get("stream_options")
    include_usage = isinstance(options, Mapping) and bool(options.get("include_usage"))
    head = _head(body, completion_id, "chat.completion.chunk")

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        out = {**head, "choices": [choice]}
        if include_usage:
            out["usage"] = None
        return out

    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [
        chunk({"content": None, "reasoning_content": piece})
        for piece in split_text(reply.reasoning, reply.text_chunks)
    ]
    chunks += [chunk({"content": piece}) for piece in split_text(reply.text, reply.text_chunks)]
    for index, (call_id, call) in enumerate(calls):
        function = {"name": call.name, "arguments": ""}
        first = {"index": index, "id": call_id, "type": "function", "function": function}
        chunks.append(chunk({"tool_calls": [first]}))
        for piece in split_text(_arguments(call), reply.argument_chunks):
            delta = {"index": index, "function": {"arguments": piece}}
            chunks.append(chunk({"tool_calls": [delta]}))
    final = chunk({}, _finish(reply))
    chunks.append(final)
    if include_usage:
        if reply.usage_with_finish:
            final["usage"] = _usage(reply, body)
        else:
            chunks.append({**head, "choices": [], "usage": _usage(reply, body)})
    return [*(SSEEvent(c) for c in chunks), SSE_DONE]


def _completion(
    reply: ChatReply,
    body: Mapping[str, Any],
    calls: Sequence[tuple[str, ChatToolCall]],
    completion_id: str,
) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": reply.text if reply.text or not calls else None,
        "refusal": None,
    }
    if reply.reasoning:
        message["reasoning_content"] = reply.reasoning
    if calls:
        message["tool_calls"] = [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": _arguments(call)},
            }
            for call_id, call in calls
        ]
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": _finish(reply)}
    return {
        **_head(body, completion_id, "chat.completion"),
        "choices": [choice],
        "usage": _usage(reply, body),
    }


def check_request(body: Any) -> str | None:
    """What the real API would reject in a request ``body`` (None: acceptable)."""
    if not isinstance(body, Mapping):
        return "We could not parse the JSON body of your request."
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "you must provide a model parameter"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "Invalid 'messages': expected a non-empty array."
    if body.get("stream_options") is not None and not body.get("stream"):
        return "The 'stream_options' parameter is only allowed when 'stream' is enabled."
    problem = _check_tools(body.get("tools"))
    if problem is not None:
        return problem
    open_calls: list[str] = []
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, Mapping) or message.get("role") not in _ROLES:
            return f"Invalid '{where}': role must be one of {sorted(_ROLES)}."
        role = message["role"]
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in open_calls:
                return (
                    f"Invalid parameter: '{where}' with role 'tool' must be a response to a"
                    f" preceding message with 'tool_calls' (tool_call_id {call_id!r})."
                )
            open_calls.remove(call_id)
            continue
        if open_calls:
            return (
                "An assistant message with 'tool_calls' must be followed by tool messages"
                " responding to each 'tool_call_id'. The following tool_call_ids did not"
                f" have response messages: {', '.join(open_calls)}"
            )
        if role == "assistant" and message.get("tool_calls"):
            problem = _check_calls(where, message["tool_calls"])
            if problem is not None:
                return problem
            open_calls = [call["id"] for call in message["tool_calls"]]
        elif not isinstance(message.get("content"), str | list):
            return f"Invalid '{where}.content': expected a string or an array of parts."
    if open_calls:
        return f"tool_call_ids did not have response messages: {', '.join(open_calls)}"
    return None


def _check_calls(where: str, calls: Any) -> str | None:
    if not isinstance(calls, list):
        return f"Invalid '{where}.tool_calls': expected an array."
    for n, call in enumerate(calls):
        function = call.get("function") if isinstance(call, Mapping) else None
        if (
            not isinstance(function, Mapping)
            or not isinstance(call.get("id"), str)
            or call.get("type") != "function"
            or not isinstance(function.get("name"), str)
        ):
            return f"Invalid '{where}.tool_calls[{n}]': expected id, type, function.name."
        if not isinstance(function.get("arguments"), str):
            return f"Invalid '{where}.tool_calls[{n}].function.arguments': expected a string."
    return None


def _check_tools(tools: Any) -> str | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        return "Invalid 'tools': expected an array."
    for n, spec in enumerate(tools):
        function = spec.get("function") if isinstance(spec, Mapping) else None
        if (
            not isinstance(function, Mapping)
            or spec.get("type") != "function"
            or not isinstance(function.get("name"), str)
            or not isinstance(function.get("parameters", {}), Mapping)
        ):
            return f"Invalid 'tools[{n}]': expected type 'function' with function.name."
    return None
