"""A model's HTTP calls on the tape without the proxy hop: :class:`TapeTransport`.

A model client in the proxy's own process (dsh-llm-openai's pooled
``httpx.AsyncClient``) is given this transport instead of a connection to the proxy.
A request to the label's :meth:`~dsh.tape.TapeProxy.base_url` is recorded or answered
here, with the proxy's own matching and line writing (:class:`~dsh.tape._state.TapeState`):
recording forwards it to the upstream and tees the streamed answer into the same
exchange line the proxy writes; replaying answers with the recorded status, content
type and body, or 409 with the :class:`~dsh.tape.Divergence`; resuming does one, else
the other. Any other request goes out untouched.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import httpx

from dsh.tape._format import parse_body
from dsh.tape._http import HOP_HEADERS, PASS_BACK, error_body
from dsh.tape._state import TapeState

__all__ = ["TapeTransport"]


class TapeTransport(httpx.AsyncBaseTransport):
    """Records and replays requests under ``prefix`` (the proxy's route for ``label``)
    on ``tape`` (see the module), forwarding to ``upstream`` when recording; made by
    :meth:`dsh.tape.TapeProxy.transport`."""

    def __init__(self, tape: TapeState, label: str, prefix: str, upstream: str | None) -> None:
        self.tape = tape
        self.label = label
        self._prefix = prefix
        self._upstream = upstream
        self._client: httpx.AsyncClient | None = None
        """Forwards upstream (made on first use; ``HTTPS_PROXY`` as the proxy's)."""

    def _forwarder(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=None)
        return self._client

    async def aclose(self) -> None:
        """Close the connections to the upstream."""
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Answer ``request`` from the tape, or forward it and record the exchange."""
        url = str(request.url)
        rest = url[len(self._prefix) :]
        if not url.startswith(self._prefix) or rest[:1] not in ("", "/", "?"):  # not taped
            response = await self._forwarder().send(request, stream=True)
            stream = _Tee(response, None)
            return httpx.Response(response.status_code, headers=response.headers, stream=stream)
        raw = await request.aread()
        tape = self.tape
        value = parse_body(raw)
        if tape.mode != "record":
            answer = tape.answer_from_tape(
                self.label, request.method, rest, value, resuming=tape.mode == "resume"
            )
            if answer is not None:
                headers = [("content-type", answer.content_type)]
                return httpx.Response(answer.status, headers=headers, content=answer.body)
        upstream = self._upstream
        if upstream is None:
            message = f"tape proxy: no upstream for label {self.label!r}"
            body = error_body(404, "not_found", message)
            return httpx.Response(404, headers=[("content-type", "application/json")], content=body)
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in HOP_HEADERS]
        headers.append(("accept-encoding", "identity"))
        outgoing = httpx.Request(
            request.method,
            upstream.rstrip("/") + rest,
            headers=headers,
            content=raw,
            extensions=request.extensions,
        )
        response = await self._forwarder().send(outgoing, stream=True)
        content_type = response.headers.get("content-type", "")
        back = [("content-type", content_type)] if content_type else []
        back += [(k, response.headers[k]) for k in PASS_BACK if k in response.headers]

        def done(body: bytes) -> None:
            tape.record_exchange(
                self.label, request.method, rest, value, response.status_code, content_type, body
            )

        return httpx.Response(
            response.status_code, headers=back, stream=_Tee(response, done), request=request
        )


class _Tee(httpx.AsyncByteStream):
    """The upstream's answer as it arrives (decoded); once it has been read whole,
    ``done`` gets it (an answer the client left unread, or that broke, is not recorded).
    Without ``done``: the raw bytes, passed through."""

    def __init__(self, response: httpx.Response, done: Callable[[bytes], None] | None) -> None:
        self._response = response
        self._done = done

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._done is None:
            async for chunk in self._response.aiter_raw():
                yield chunk
            return
        body = bytearray()
        async for chunk in self._response.aiter_bytes():
            if chunk:
                body += chunk
                yield chunk
        self._done(bytes(body))

    async def aclose(self) -> None:
        await self._response.aclose()
