"""The code behind :mod:`dsh.testing.model_servers.gemini` (see its docstring)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dsh.testing.model_servers._content import json_body, mappings
from dsh.testing.model_servers._http import Exchange, RecordedRequest
from dsh.testing.model_servers._openai_chat import split_text
from dsh.testing.model_servers._rules import ContentRule, RuleServer
from dsh.testing.model_servers._script import NO_FAULTS, StreamFaults
from dsh.testing.model_servers._sse import SSEEvent

__all__ = [
    "GEMINI_MODEL",
    "FunctionResponse",
    "GeminiCall",
    "GeminiReply",
    "GeminiRule",
    "GeminiServer",
    "check_gemini_request",
    "function_responses",
    "gemini_error",
    "reply_with_function_response",
    "tool_step",
    "user_text",
]

GEMINI_MODEL = "gemini-2.5-flash"
"""The model a :class:`GeminiServer` serves unless told others."""

_STATUSES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def gemini_error(status: int, message: str) -> dict[str, Any]:
    """An error body in Google's shape: ``{"error": {"code", "message", "status"}}``."""
    name = _STATUSES.get(status, "INTERNAL" if status >= 500 else "INVALID_ARGUMENT")
    return {"error": {"code": status, "message": message, "status": name}}


@dataclass(frozen=True, slots=True)
class GeminiCall:
    """A ``functionCall`` part of a scripted reply (``args`` sent as a JSON object)."""

    name: str
    args: Mapping[str, Any] = field(default_factory=dict)
    id: str | None = None
    """Sent as the part's ``id`` when set (the real API leaves it out for most models)."""


@dataclass(frozen=True, slots=True)
class GeminiReply:
    """One scripted model turn: text and/or function calls (in that order)."""

    text: str = ""
    calls: Sequence[GeminiCall] = ()
    finish_reason: str = "STOP"
    """The candidate's ``finishReason`` (the real API says ``STOP`` after calls too)."""
    usage: Mapping[str, int] | None = None
    """``promptTokenCount`` / ``candidatesTokenCount``; default: word counts."""
    text_chunks: int = 3
    """Stream the text in this many chunks (one SSE event each)."""
    faults: StreamFaults = NO_FAULTS
    """Break the stream (see :class:`~dsh.testing.model_servers.StreamFaults`)."""


@dataclass(frozen=True, slots=True)
class FunctionResponse:
    """A ``functionResponse`` part the client sent: the call's name and its ``response``."""

    name: str
    response: Mapping[str, Any]

    @property
    def output(self) -> str:
        """The result as text: ``response.output``, else ``response.error``, else the JSON."""
        for key in ("output", "error"):
            value = self.response.get(key)
            if value is not None:
                return value if isinstance(value, str) else json.dumps(value)
        return json.dumps(dict(self.response))

    @property
    def is_error(self) -> bool:
        """The client reported the call as failed (``response.error``)."""
        return self.response.get("error") is not None


class GeminiRule(ContentRule):
    """Answer requests matching ``match`` with ``replies`` (picked by tool step).

    ``match`` is a substring of (or a regex searched in) :func:`user_text`, or a
    predicate of the request.
    """

    __slots__ = ()

    def prompt_text(self, request: RecordedRequest) -> str:
        """:func:`user_text`: the user contents' text parts."""
        return user_text(request)

    def tool_step(self, request: RecordedRequest) -> int:
        """:func:`tool_step`: rounds of function responses after the latest prompt."""
        return tool_step(request)


def _contents(request: RecordedRequest) -> list[Mapping[str, Any]]:
    return mappings(json_body(request).get("contents"))


def _parts(content: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return mappings(content.get("parts"))


def user_text(request: RecordedRequest) -> str:
    """The ``text`` parts of every user content of a request, joined (function
    responses excluded)."""
    return "\n".join(
        str(part["text"])
        for content in _contents(request)
        if content.get("role", "user") == "user"
        for part in _parts(content)
        if isinstance(part.get("text"), str)
    )


def _rounds_since_prompt(request: RecordedRequest) -> list[list[Mapping[str, Any]]]:
    rounds: list[list[Mapping[str, Any]]] = []
    for content in reversed(_contents(request)):
        if content.get("role", "user") != "user":
            continue
        answers = [p for p in _parts(content) if isinstance(p.get("functionResponse"), Mapping)]
        if not answers:
            break  # the latest prompt
        rounds.append(answers)
    rounds.reverse()
    return rounds


def function_responses(request: RecordedRequest) -> list[FunctionResponse]:
    """The function responses sent since the latest prompt, in order."""
    found: list[FunctionResponse] = []
    for round_ in _rounds_since_prompt(request):
        for part in round_:
            answer = part["functionResponse"]
            response = answer.get("response")
            found.append(
                FunctionResponse(
                    str(answer.get("name", "")),
                    response if isinstance(response, Mapping) else {"output": response},
                )
            )
    return found


def tool_step(request: RecordedRequest) -> int:
    """How many rounds of function responses follow the latest prompt (0: a fresh prompt)."""
    return len(_rounds_since_prompt(request))


def reply_with_function_response(
    template: str = "Tool said: {output}",
) -> Callable[[RecordedRequest], GeminiReply]:
    """A script item answering ``template`` with the last function response filled in.

    Fields: ``{output}`` (:attr:`FunctionResponse.output`), ``{name}`` and
    ``{is_error}`` (``True``/``False``).
    """

    def reply(request: RecordedRequest) -> GeminiReply:
        answers = function_responses(request)
        last = answers[-1] if answers else FunctionResponse("", {})
        return GeminiReply(
            text=template.format(output=last.output, name=last.name, is_error=last.is_error)
        )

    return reply


class GeminiServer(RuleServer[GeminiRule]):
    """Fake Gemini API: ``models/{model}:streamGenerateContent`` (``?alt=sse``),
    ``:generateContent`` and ``:countTokens`` under ``/v1beta`` and ``/v1``, for each
    of ``models``. See the module docstring.

    With ``strict`` (default) requests the real API rejects get HTTP 400 in Google's
    error shape (see :func:`check_gemini_request`). With ``api_key`` set, a request
    without that ``x-goog-api-key`` header (or ``key`` query parameter) gets 401.
    """

    def __init__(
        self,
        *script: Any,
        default: Any = None,
        rules: Sequence[GeminiRule] = (),
        models: Sequence[str] = (GEMINI_MODEL,),
        api_key: str | None = None,
        strict: bool = True,
    ) -> None:
        generate = [
            f"/{version}/models/{model}:{method}"
            for version in ("v1beta", "v1")
            for model in models
            for method in ("streamGenerateContent", "generateContent")
        ]
        super().__init__(
            *script, default=default, rules=rules, rule_type=GeminiRule, paths=generate
        )
        self.models = tuple(models)
        self.api_key = api_key
        self.strict = strict
        self._responses = 0
        for version in ("v1beta", "v1"):
            for model in models:
                self.route("POST", f"/{version}/models/{model}:countTokens", self._count_tokens)

    @property
    def api_base(self) -> str:
        """What ``GOOGLE_GEMINI_BASE_URL`` should be (no version: clients append it)."""
        return self.base_url

    @property
    def generate_requests(self) -> list[RecordedRequest]:
        """The logged ``generateContent`` / ``streamGenerateContent`` requests for the
        served models (what the rules and the script answer)."""
        return [r for r in self.requests if r.url_path in self._rule_paths]

    def error_body(self, status: int, message: str) -> Any:
        """Google's error shape."""
        return gemini_error(status, message)

    def _authorized(self, request: RecordedRequest) -> bool:
        if self.api_key is None:
            return True
        return self.api_key in (request.header("x-goog-api-key"), *request.query.get("key", []))

    def reject(self, request: RecordedRequest) -> tuple[int, Any] | None:
        """401 without the key (when ``api_key`` is set); 400 for what the API rejects."""
        if not self._authorized(request):
            return 401, gemini_error(401, "API key not valid. Please pass a valid API key.")
        problem = check_gemini_request(request.json) if self.strict else None
        return None if problem is None else (400, gemini_error(400, problem))

    async def _count_tokens(self, exchange: Exchange) -> None:
        if not self._authorized(exchange.request):
            await exchange.send_json(401, gemini_error(401, "API key not valid."))
            return
        words = len(json.dumps(exchange.request.json).split()) if exchange.request.json else 0
        await exchange.send_json(200, {"totalTokens": words})

    async def render(self, item: Any, exchange: Exchange) -> None:
        """Answer with a :class:`GeminiReply` (or a ``str``: a text reply)."""
        if isinstance(item, str):
            item = GeminiReply(text=item)
        if not isinstance(item, GeminiReply):
            raise TypeError(f"GeminiServer cannot render a {type(item).__name__}")
        request = exchange.request
        model = request.url_path.rsplit("/", 1)[-1].split(":", 1)[0]
        self._responses += 1
        chunks = _chunks(item, model, f"fake-response-{self._responses}", json_body(request))
        if request.url_path.endswith(":streamGenerateContent"):
            if request.query.get("alt") != ["sse"]:
                await exchange.send_json_faulted(200, chunks, item.faults)  # a JSON array
                return
            await exchange.stream([SSEEvent(chunk) for chunk in chunks], item.faults)
        else:
            await exchange.send_json_faulted(200, _whole(chunks), item.faults)


def _chunks(
    reply: GeminiReply, model: str, response_id: str, body: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """The streamed ``GenerateContentResponse`` chunks; the last one finishes and counts."""
    parts: list[list[dict[str, Any]]] = []
    if reply.text:
        parts += [[{"text": piece}] for piece in split_text(reply.text, reply.text_chunks)]
    calls: list[dict[str, Any]] = []
    for call in reply.calls:
        made: dict[str, Any] = {"name": call.name, "args": dict(call.args)}
        if call.id is not None:
            made["id"] = call.id
        calls.append({"functionCall": made})
    if calls:
        parts.append(calls)
    if not parts:
        parts.append([{"text": ""}])
    chunks: list[dict[str, Any]] = []
    for n, chunk_parts in enumerate(parts):
        candidate: dict[str, Any] = {"content": {"parts": chunk_parts, "role": "model"}, "index": 0}
        chunk: dict[str, Any] = {"candidates": [candidate]}
        if n == len(parts) - 1:
            candidate["finishReason"] = reply.finish_reason
            chunk["usageMetadata"] = _usage(reply, body)
        chunk["modelVersion"] = model
        chunk["responseId"] = response_id
        chunks.append(chunk)
    return chunks


def _whole(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """The chunks as one non-streamed response (their parts joined, texts merged)."""
    parts: list[dict[str, Any]] = []
    for chunk in chunks:
        for part in chunk["candidates"][0]["content"]["parts"]:
            if "text" in part and parts and "text" in parts[-1]:
                parts[-1] = {"text": parts[-1]["text"] + part["text"]}
            else:
                parts.append(dict(part))
    last = chunks[-1]
    candidate = {**last["candidates"][0], "content": {"parts": parts, "role": "model"}}
    return {**last, "candidates": [candidate]}


def _usage(reply: GeminiReply, body: Mapping[str, Any]) -> dict[str, int]:
    if reply.usage is not None:
        prompt = int(reply.usage.get("promptTokenCount", 0))
        completion = int(reply.usage.get("candidatesTokenCount", 0))
    else:
        prompt = len(json.dumps(body.get("contents") or []).split())
        completion = len(reply.text.split()) + sum(
            max(1, len(json.dumps(dict(call.args))) // 4) for call in reply.calls
        )
    return {
        "promptTokenCount": prompt,
        "candidatesTokenCount": completion,
        "totalTokenCount": prompt + completion,
    }


def check_gemini_request(body: Any) -> str | None:
    """What the real API would reject in a ``generateContent`` request ``body`` (None:
    acceptable).

    Checks: a non-empty ``contents`` list of ``user`` / ``model`` contents, each with
    a non-empty ``parts`` list; every user content of function responses answering
    the function calls of the model content before it, one for one.
    """
    if not isinstance(body, Mapping):
        return "Invalid JSON payload received."
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        return "* GenerateContentRequest.contents: contents is not specified"
    calls_before = 0
    for index, content in enumerate(contents):
        where = f"* GenerateContentRequest.contents[{index}]"
        if not isinstance(content, Mapping) or content.get("role", "user") not in (
            "user",
            "model",
        ):
            return f"{where}.role: Please use a valid role: user, model."
        parts = content.get("parts")
        if not isinstance(parts, list) or not parts:
            return f"{where}.parts: contents.parts must not be empty."
        parts = mappings(parts)
        answers = sum(1 for p in parts if "functionResponse" in p)
        if answers and answers != calls_before:
            return (
                "Please ensure that the number of function response parts is equal to"
                " the number of function call parts of the function call turn."
            )
        calls_before = sum(1 for p in parts if "functionCall" in p)
    return None
