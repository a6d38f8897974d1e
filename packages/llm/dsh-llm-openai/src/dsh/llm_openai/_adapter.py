"""The ``openai`` model adapter: streamed chat completions over httpx.

Every await on the network is bounded by the configured timeouts and is
abortable: when the request's :class:`~dsh.core._signals.AbortSignal` fires, the
pending read is cancelled and the response closed, so the server sees the
connection go away. Cancelling the caller (an agent's cancel scope) does the
same. Failures become :class:`~dsh.core._llm.ModelError` with a message that says
what happened and where: HTTP errors carry the status and the server's message.
Credentials in the URL (``http://user:pass@host/v1``, ``?api_key=...``) never appear
in messages, logs or ``repr``: the URL is shown through :func:`dsh.core.tracing.redact_urls`.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from types import TracebackType
from typing import Any, Self, TypeVar

import anyio
import httpx

from dsh.core import AbortSignal, ModelRequest, Usage
from dsh.core.models import ModelDone, ModelError, ModelStreamEvent
from dsh.core.tracing import redact_urls
from dsh.llm_openai._config import OpenAIOptions
from dsh.llm_openai._messages import chat_messages, tool_definitions
from dsh.llm_openai._pricing import priced, ready, warm
from dsh.llm_openai._stream import ChunkAssembler, SSELines, error_detail

__all__ = ["OpenAIChatAdapter", "SharedClient"]

_log = logging.getLogger("dsh.llm_openai")

T = TypeVar("T")

_ERROR_BODY_LIMIT = 64 * 1024
_USER_AGENT = "dsh-llm-openai/0.1"


class SharedClient:
    """One pooled :class:`httpx.AsyncClient`, made on first use, closed by :meth:`aclose`.

    The plugin keeps one for all the models it serves (connections are reused
    across calls and agents); a standalone adapter keeps its own. ``transport`` (an
    httpx transport, e.g. a tape's) replaces the network for this client.
    """

    def __init__(self, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._client: httpx.AsyncClient | None = None
        self._closed = False
        self._transport = transport

    def get(self) -> httpx.AsyncClient:
        """The client (made now if needed); :class:`ModelError` once closed."""
        if self._closed:
            raise ModelError("the HTTP client of this model was closed (plugin unloaded?)")
        if self._client is None:
            self._client = httpx.AsyncClient(
                headers={"user-agent": _USER_AGENT},
                limits=httpx.Limits(max_connections=100, max_keepalive_connections=20),
                transport=self._transport,
            )
        return self._client

    async def aclose(self) -> None:
        """Close the client and its pooled connections. Idempotent."""
        self._closed = True
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()


class OpenAIChatAdapter:
    """Streams responses from an OpenAI-compatible ``/chat/completions`` endpoint.

    ``model`` is used when a request names none (``ModelConfig.model`` empty);
    it defaults to ``options.model``. Without ``client`` the adapter owns a
    connection pool (over ``transport`` when given): close it with :meth:`aclose` (or
    ``async with``).
    """

    def __init__(
        self,
        options: OpenAIOptions | None = None,
        *,
        model: str = "",
        client: SharedClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.options = options or OpenAIOptions()
        self.model = model or self.options.model
        self._owns_client = client is None
        self._clients = client if client is not None else SharedClient(transport)
        if self.options.pricing != "none":
            warm()
        self.reports_cost = self.options.pricing != "none"
        """False with ``pricing = "none"``: a ``usd`` budget is then refused at start (a
        model without a known price fails the run at its first call instead)."""
        self._timeout = httpx.Timeout(
            connect=self.options.connect_timeout,
            read=self.options.read_timeout,
            write=self.options.write_timeout,
            pool=self.options.connect_timeout,
        )

    def with_transport(self, transport: httpx.AsyncBaseTransport) -> OpenAIChatAdapter:
        """The same model over ``transport`` (its own client, closed with
        :meth:`aclose`): the seam a tape uses to record and replay this model's calls
        in process (:meth:`dsh.tape.TapeProxy.transport`)."""
        return OpenAIChatAdapter(self.options, model=self.model, transport=transport)

    async def aclose(self) -> None:
        """Close the connection pool if this adapter owns it."""
        if self._owns_client:
            await self._clients.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"<OpenAIChatAdapter {self.model} at {redact_urls(self.options.base_url)}>"

    # -- the request ----------------------------------------------------------------

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body for ``request``: model, messages, tools, streaming, extras."""
        body: dict[str, Any] = dict(self.options.extra_body)
        body["model"] = request.model or self.model
        body["messages"] = chat_messages(request.system, request.events)
        body["stream"] = True
        if self.options.include_usage:
            body.setdefault("stream_options", {"include_usage": True})
        if request.tools:
            body["tools"] = tool_definitions(request.tools)
        return body

    def _headers(self) -> dict[str, str]:
        headers = {"accept": "text/event-stream", **self.options.headers}
        env = self.options.api_key_env
        if env:
            key = os.environ.get(env, "").strip()
            if not key:
                raise ModelError(
                    f"no API key: the environment variable {env} is not set (the openai"
                    f" adapter needs a key for {redact_urls(self.options.base_url)}; set"
                    ' api_key_env to read another variable, or to "" for a server without'
                    " authentication)"
                )
            headers["authorization"] = f"Bearer {key}"
        return headers

    # -- streaming ------------------------------------------------------------------

    async def stream(
        self, request: ModelRequest, signal: AbortSignal
    ) -> AsyncIterator[ModelStreamEvent]:
        """Yield text deltas as they arrive, then the tool calls, then one ``ModelDone``."""
        url = self.options.url
        body = self.build_body(request)
        headers = self._headers()
        client = self._clients.get()
        outgoing = client.build_request(
            "POST", url, json=body, headers=headers, timeout=self._timeout
        )
        _log.debug(
            "POST %s model=%s messages=%d", redact_urls(url), body["model"], len(body["messages"])
        )
        response = await self._guard(signal, lambda: client.send(outgoing, stream=True))
        try:
            if response.status_code >= 400:
                raw = await self._guard(signal, lambda: _read_capped(response))
                raise self._http_error(response, raw)
            assembler = ChunkAssembler()
            content_type = response.headers.get("content-type", "")
            if "json" in content_type and "event-stream" not in content_type:
                raw = await self._guard(signal, response.aread)
                try:
                    completion = json.loads(raw)
                except ValueError:
                    raise ModelError(
                        f"malformed response from {redact_urls(url)}: not JSON: {raw[:200]!r}"
                    ) from None
                for delta in assembler.feed_completion(completion):
                    yield delta
            else:
                sse = SSELines()
                # (one abortable read per piece of text as it arrives, not per line: a
                # replayed body comes whole, a live stream in a piece or so per event)
                texts = response.aiter_text()
                while True:
                    try:
                        text = await self._guard(signal, texts.__anext__)
                    except StopAsyncIteration:
                        break
                    for event_data in sse.feed_text(text):
                        for delta in assembler.feed(event_data):
                            yield delta
                rest = sse.flush()
                if rest is not None:
                    for delta in assembler.feed(rest):
                        yield delta
            for event in assembler.finish():
                if isinstance(event, ModelDone) and event.usage is not None:
                    usage = await self._priced(event.usage, str(body["model"]))
                    event = ModelDone(event.stop_reason, usage)
                yield event
        finally:
            await response.aclose()

    async def _priced(self, usage: Usage, model: str) -> Usage:
        """The call's usage with its cost where the price table knows the model (the
        table is read in a worker thread until it has loaded; ``pricing = "none"`` reads
        no table)."""
        args = (usage, model, self.options.base_url, self.options.pricing)
        if ready() or self.options.pricing == "none":
            return priced(*args)
        return await anyio.to_thread.run_sync(priced, *args)

    async def _guard(self, signal: AbortSignal, call: Callable[[], Awaitable[T]]) -> T:
        """Await ``call()``: abortable by ``signal``, transport errors as ModelError."""
        if signal.aborted:
            raise ModelError(f"the model call was aborted ({signal.reason})")
        with anyio.CancelScope() as scope:
            remove = signal.on_abort(lambda _reason: scope.cancel())
            try:
                return await call()
            except httpx.HTTPError as exc:
                raise self._transport_error(exc) from exc
            finally:
                remove()
        # Only reached when our own scope was cancelled by the signal (a cancelled
        # caller gets its cancellation, not this).
        raise ModelError(f"the model call was aborted ({signal.reason})")

    # -- errors ---------------------------------------------------------------------

    def _http_error(self, response: httpx.Response, raw: bytes) -> ModelError:
        status = response.status_code
        try:
            payload: Any = json.loads(raw)
        except ValueError:
            payload = None
        if isinstance(payload, dict) and payload:
            detail = error_detail(payload.get("error") or payload)
        else:
            detail = raw.decode("utf-8", "replace").strip()[:500] or "(empty body)"
        where = redact_urls(self.options.url)
        message = f"HTTP {status} {response.reason_phrase} from {where}: {detail}"
        if status in (401, 403) and self.options.api_key_env:
            message += f" (check the API key in ${self.options.api_key_env})"
        retry_after = response.headers.get("retry-after")
        if status == 429 and retry_after:
            message += f" (retry after {retry_after} s)"
        return ModelError(message, status=status)

    def _transport_error(self, exc: httpx.HTTPError) -> ModelError:
        url = redact_urls(self.options.url)
        what = redact_urls(str(exc)) or type(exc).__name__
        if isinstance(exc, httpx.ConnectTimeout):
            text = f"timed out connecting to {url} ({self.options.connect_timeout} s)"
        elif isinstance(exc, httpx.ReadTimeout):
            text = (
                f"no data from {url} for {self.options.read_timeout} s"
                " (read timeout): the server stalled"
            )
        elif isinstance(exc, httpx.TimeoutException):
            text = f"timed out talking to {url}: {type(exc).__name__}"
        elif isinstance(exc, httpx.ConnectError):
            text = f"cannot connect to {url}: {what}"
        elif isinstance(exc, httpx.RemoteProtocolError):
            text = f"the connection to {url} broke mid-response: {what}"
        elif isinstance(exc, httpx.ReadError):
            text = f"the connection to {url} was lost mid-response: {what}"
        else:
            text = f"the request to {url} failed: {type(exc).__name__}: {what}"
        return ModelError(text)


async def _read_capped(response: httpx.Response) -> bytes:
    """Up to 64 KiB of an error body (enough for any error message)."""
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) >= _ERROR_BODY_LIMIT:
            break
    return bytes(body[:_ERROR_BODY_LIMIT])
