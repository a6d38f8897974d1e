"""The code behind :mod:`dsh.testing.model_servers.anthropic_messages` (see its docstring)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dsh.testing.model_servers._content import json_body, mappings, text_parts
from dsh.testing.model_servers._http import Exchange, RecordedRequest
from dsh.testing.model_servers._openai_chat import split_text
from dsh.testing.model_servers._rules import ContentRule, RuleServer
from dsh.testing.model_servers._script import NO_FAULTS, StreamFaults
from dsh.testing.model_servers._sse import SSEEvent

__all__ = [
    "AnthropicMessagesServer",
    "MessagesReply",
    "MessagesRule",
    "ToolUse",
    "anthropic_error",
    "check_messages_request",
    "reply_with_tool_result",
    "tool_results",
    "tool_step",
    "user_text",
]

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def anthropic_error(status: int, message: str) -> dict[str, Any]:
    """An error body in Anthropic's shape: ``{"type": "error", "error": {type, message}}``."""
    kind = _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


@dataclass(frozen=True, slots=True)
class ToolUse:
    """A ``tool_use`` block in a scripted reply.

    ``input`` as a mapping is sent as JSON; a ``str`` is sent verbatim as the
    ``partial_json`` (so invalid JSON can be scripted). ``id`` defaults to a
    fresh ``toolu_fake<n>``.
    """

    name: str
    input: Mapping[str, Any] | str = field(default_factory=dict)
    id: str | None = None


@dataclass(frozen=True, slots=True)
class MessagesReply:
    """One scripted assistant message: a text block and/or tool uses (in that order)."""

    text: str = ""
    tool_uses: Sequence[ToolUse] = ()
    stop_reason: str | None = None
    """Default: ``tool_use`` when there are tool uses, else ``end_turn``."""
    usage: Mapping[str, int] | None = None
    """``input_tokens`` / ``output_tokens``; default: word counts."""
    text_chunks: int = 3
    """Stream the text in this many ``text_delta`` events."""
    input_chunks: int = 2
    """Stream each tool input in this many ``input_json_delta`` events."""
    faults: StreamFaults = NO_FAULTS
    """Break the stream: ``hang_after`` stalls mid-stream, ``reset_after`` resets,
    ``close_after`` ends the body early, ``delay`` slows every event."""


class MessagesRule(ContentRule):
    """Answer requests matching ``match`` with ``replies`` (picked by tool step).

    ``match`` is a substring of (or a regex searched in) :func:`user_text`, or a
    predicate of the request.
    """

    __slots__ = ()

    def prompt_text(self, request: RecordedRequest) -> str:
        """:func:`user_text`: every user text block (tool results excluded)."""
        return user_text(request)

    def tool_step(self, request: RecordedRequest) -> int:
        """:func:`tool_step`: rounds of tool results after the latest prompt."""
        return tool_step(request)


def _messages(request: RecordedRequest) -> list[Mapping[str, Any]]:
    return mappings(json_body(request).get("messages"))


def _blocks(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return mappings(content)


def _block_text(content: Any) -> str:
    return text_parts(content, ("text",))


def user_text(request: RecordedRequest) -> str:
    """The text blocks of every user message of a request, joined (tool results excluded)."""
    return "\n".join(
        str(block.get("text", ""))
        for message in _messages(request)
        if message.get("role") == "user"
        for block in _blocks(message)
        if block.get("type") == "text"
    )


def _rounds_since_prompt(request: RecordedRequest) -> list[list[Mapping[str, Any]]]:
    rounds: list[list[Mapping[str, Any]]] = []
    for message in reversed(_messages(request)):
        if message.get("role") != "user":
            continue
        results = [b for b in _blocks(message) if b.get("type") == "tool_result"]
        if not results:
            break  # the latest prompt
        rounds.append(results)
    rounds.reverse()
    return rounds


def tool_results(request: RecordedRequest) -> list[Mapping[str, Any]]:
    """The ``tool_result`` blocks sent since the latest prompt, in order."""
    return [block for round_ in _rounds_since_prompt(request) for block in round_]


def tool_step(request: RecordedRequest) -> int:
    """How many rounds of tool results follow the latest prompt (0 for a fresh prompt)."""
    return len(_rounds_since_prompt(request))


def reply_with_tool_result(
    template: str = "Tool said: {output}",
) -> Callable[[RecordedRequest], MessagesReply]:
    """A script item answering ``template`` with the last tool result filled in.

    Fields: ``{output}`` (the result's text) and ``{is_error}`` (``True``/``False``).
    """

    def reply(request: RecordedRequest) -> MessagesReply:
        results = tool_results(request)
        last = results[-1] if results else {}
        output = _block_text(last.get("content"))
        return MessagesReply(
            text=template.format(output=output, is_error=bool(last.get("is_error")))
        )

    return reply


class AnthropicMessagesServer(RuleServer[MessagesRule]):
    """Fake ``POST /v1/messages`` and ``/v1/messages/count_tokens``. See the module docstring.

    With ``strict`` (default) requests the real API rejects get HTTP 400 in
    Anthropic's error shape (see :func:`check_messages_request`). With ``api_key``
    set, a request without that ``x-api-key`` (or bearer token) gets 401.
    """

    def __init__(
        self,
        *script: Any,
        default: Any = None,
        rules: Sequence[MessagesRule] = (),
        api_key: str | None = None,
        strict: bool = True,
    ) -> None:
        super().__init__(
            *script, default=default, rules=rules, rule_type=MessagesRule, paths=["/v1/messages"]
        )
        self.api_key = api_key
        self.strict = strict
        self._ids = itertools.count(1)
        self.route("POST", "/v1/messages/count_tokens", self._count_tokens)

    @property
    def api_base(self) -> str:
        """What ``ANTHROPIC_BASE_URL`` should be (no ``/v1``: clients append it)."""
        return self.base_url

    def error_body(self, status: int, message: str) -> Any:
        """Anthropic's error shape."""
        return anthropic_error(status, message)

    def _authorized(self, request: RecordedRequest) -> bool:
        if self.api_key is None:
            return True
        return self.api_key in (
            request.header("x-api-key"),
            (request.header("authorization") or "").removeprefix("Bearer "),
        )

    def reject(self, request: RecordedRequest) -> tuple[int, Any] | None:
        """401 without the key (when ``api_key`` is set); 400 for what the API rejects."""
        if not self._authorized(request):
            return 401, anthropic_error(401, "invalid x-api-key")
        problem = check_messages_request(request.json) if self.strict else None
        return None if problem is None else (400, anthropic_error(400, problem))

    async def _count_tokens(self, exchange: Exchange) -> None:
        if not self._authorized(exchange.request):
            await exchange.send_json(401, anthropic_error(401, "invalid x-api-key"))
            return
        words = len(json.dumps(exchange.request.json).split()) if exchange.request.json else 0
        await exchange.send_json(200, {"input_tokens": words})

    async def render(self, item: Any, exchange: Exchange) -> None:
        """Answer with a :class:`MessagesReply` (or a ``str``: a text reply)."""
        if isinstance(item, str):
            item = MessagesReply(text=item)
        if not isinstance(item, MessagesReply):
            raise TypeError(f"AnthropicMessagesServer cannot render a {type(item).__name__}")
        body = json_body(exchange.request)
        message, raw_inputs = self._message(item, body)
        if body.get("stream"):
            await exchange.stream(_events(item, message, raw_inputs), item.faults)
        else:
            await exchange.send_json_faulted(200, message, item.faults)

    def _message(
        self, reply: MessagesReply, body: Mapping[str, Any]
    ) -> tuple[dict[str, Any], list[str]]:
        """The finished message, and each tool use's input as the JSON text to stream."""
        content: list[dict[str, Any]] = []
        raw_inputs: list[str] = []
        if reply.text:
            content.append({"type": "text", "text": reply.text})
        for use in reply.tool_uses:
            raw = use.input if isinstance(use.input, str) else json.dumps(dict(use.input))
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = {}
            content.append(
                {
                    "type": "tool_use",
                    "id": use.id or f"toolu_fake{next(self._ids)}",
                    "name": use.name,
                    "input": parsed,
                }
            )
            raw_inputs.append(raw)
        message = {
            "id": f"msg_fake{next(self._ids)}",
            "type": "message",
            "role": "assistant",
            "model": str(body.get("model") or "claude-fake"),
            "content": content,
            "stop_reason": reply.stop_reason or ("tool_use" if reply.tool_uses else "end_turn"),
            "stop_sequence": None,
            "usage": _usage(reply, body),
        }
        return message, raw_inputs


def _events(reply: MessagesReply, message: dict[str, Any], raw_inputs: list[str]) -> list[SSEEvent]:
    usage = message["usage"]
    start_usage = {
        "input_tokens": usage["input_tokens"],
        "output_tokens": 1,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    opened = {**message, "content": [], "stop_reason": None, "usage": start_usage}
    events = [
        _event("message_start", message=opened),
        _event("ping"),
    ]
    raws = iter(raw_inputs)
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            events.append(
                _event(
                    "content_block_start",
                    index=index,
                    content_block={"type": "text", "text": ""},
                )
            )
            events += [
                _event(
                    "content_block_delta",
                    index=index,
                    delta={"type": "text_delta", "text": piece},
                )
                for piece in split_text(block["text"], reply.text_chunks)
            ]
        else:
            started = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            events.append(_event("content_block_start", index=index, content_block=started))
            events += [
                _event(
                    "content_block_delta",
                    index=index,
                    delta={"type": "input_json_delta", "partial_json": piece},
                )
                for piece in split_text(next(raws), reply.input_chunks)
            ]
        events.append(_event("content_block_stop", index=index))
    events += [
        _event(
            "message_delta",
            delta={"stop_reason": message["stop_reason"], "stop_sequence": None},
            usage={"output_tokens": usage["output_tokens"]},
        ),
        _event("message_stop"),
    ]
    return events


def _event(kind: str, **data: Any) -> SSEEvent:
    return SSEEvent({"type": kind, **data}, event=kind)


def _usage(reply: MessagesReply, body: Mapping[str, Any]) -> dict[str, int]:
    if reply.usage is not None:
        prompt = int(reply.usage.get("input_tokens", 0))
        completion = int(reply.usage.get("output_tokens", 0))
    else:
        words = 0
        for message in body.get("messages") or []:
            if isinstance(message, Mapping):
                for block in _blocks(message):
                    words += len(_block_text([block]).split())
                    words += len(_block_text(block.get("content")).split())
        prompt = words
        completion = len(reply.text.split()) + sum(
            max(1, len(str(use.input)) // 4) for use in reply.tool_uses
        )
    return {
        "input_tokens": prompt,
        "output_tokens": completion,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def check_messages_request(body: Any) -> str | None:
    """What the real API would reject in a Messages request ``body`` (None: acceptable).

    Checks: ``model`` and a positive integer ``max_tokens``; a non-empty
    ``messages`` list of ``user`` / ``assistant`` messages with string or block
    content; every ``tool_result`` answering a ``tool_use`` of the message
    before it.
    """
    if not isinstance(body, Mapping):
        return "We could not parse the JSON body of your request."
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model: Field required"
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        return "max_tokens: Field required (a positive integer)"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    previous_uses: set[str] = set()
    for index, message in enumerate(messages):
        where = f"messages.{index}"
        if not isinstance(message, Mapping) or message.get("role") not in ("user", "assistant"):
            return f"{where}.role: Input should be 'user' or 'assistant'"
        content = message.get("content")
        if not isinstance(content, str | list):
            return f"{where}.content: Input should be a valid string or list"
        uses: set[str] = set()
        for n, block in enumerate(_blocks(message)):
            kind = block.get("type")
            if kind == "tool_use" and isinstance(block.get("id"), str):
                uses.add(block["id"])
            elif kind == "tool_result" and block.get("tool_use_id") not in previous_uses:
                return (
                    f"{where}.content.{n}: unexpected `tool_use_id` found in `tool_result`"
                    f" blocks: {block.get('tool_use_id')}. Each `tool_result` block must have"
                    " a corresponding `tool_use` block in the previous message."
                )
        previous_uses = uses
    return None
