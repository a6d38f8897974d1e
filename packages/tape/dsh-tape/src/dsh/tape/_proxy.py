"""The recording proxy: :class:`TapeProxy` (the format is in the package docstring)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
from collections.abc import AsyncIterator, Mapping
from typing import Any, Self
from urllib.parse import quote

import httpx

from dsh.core.tapes import ToolTape
from dsh.tape._format import TapeError, parse_body, redact_path, redact_text
from dsh.tape._http import (
    HEAD_LIMIT,
    HOP_HEADERS,
    PASS_BACK,
    BadRequest,
    Request,
    error_body,
    head_bytes,
    read_request,
    write_chunk,
    write_whole,
)
from dsh.tape._normalise import Normalisation
from dsh.tape._route import LABEL_ROUTE, RouteError, parse_target
from dsh.tape._state import Mode, TapeState
from dsh.tape._transport import TapeTransport
from dsh.tape.serving import BackgroundServer

__all__ = ["TapeProxy"]


class TapeProxy(TapeState, BackgroundServer):
    """A recording proxy for model HTTP APIs, on 127.0.0.1 in a thread of its own.

    ``mode="record"`` forwards every request to ``upstreams[label]`` (streaming the
    answer through as it arrives) and appends the exchange to
    ``<directory>/tape.jsonl``; ``mode="replay"`` answers from that tape with no
    upstream, and answers a request the tape does not hold with HTTP 409 (the first
    one is kept as :attr:`divergence`). Point a client at :meth:`base_url` where its
    API's base URL went. ``meta`` is written into the header line (record mode).

    Every path starts with a secret token (:meth:`base_url` and :attr:`proxy_url`
    hold it; a request without it is answered 404), so another local process or a
    web page cannot use the proxy. Besides the labels of ``upstreams``, the route
    ``<proxy_url>/x/<label>/<base64url(upstream)>/...`` forwards to the upstream it
    carries (record mode; replay ignores it): what
    :func:`dsh.subagent.kit.taped_url` builds for a product in any process of the
    tree from ``DSH_TAPE_PROXY`` (:meth:`env`).

    ``normalise`` (:class:`~dsh.tape.Normalisation`) rewrites what legitimately changes
    between a recording and its replay (a temporary folder, the date) before a request
    is written or matched; give the same one to both.

    In the proxy's own process, :meth:`transport` (a model's HTTP client) and
    :meth:`tool_tape` (the agents' tool calls) reach the same tape without HTTP.

    Use as a context manager (``with`` or ``async with``) or :meth:`start` /
    :meth:`close`; closing ends every connection and joins the thread.
    """

    stream_limit = HEAD_LIMIT

    def __init__(
        self,
        directory: str | os.PathLike[str],
        mode: Mode = "record",
        upstreams: Mapping[str, str] | None = None,
        *,
        meta: Mapping[str, Any] | None = None,
        host: str = "127.0.0.1",
        timeout: float = 600.0,
        replay_tools: bool = False,
        normalise: Normalisation | None = None,
    ) -> None:
        TapeState.__init__(
            self, directory, mode, meta=meta, replay_tools=replay_tools, normalise=normalise
        )
        BackgroundServer.__init__(self, host)
        self.upstreams = dict(upstreams or {})
        """Record mode: label -> the real API's base URL."""
        self.errors: list[Exception] = []
        """Unexpected errors while answering (each answered HTTP 500 when it could be)."""
        self._token = secrets.token_urlsafe(18)
        self._timeout = timeout
        self._http: httpx.AsyncClient | None = None

    # -- public ---------------------------------------------------------------------

    @property
    def proxy_url(self) -> str:
        """``http://127.0.0.1:<port>/<token>``: the value of ``DSH_TAPE_PROXY`` that
        announces this proxy to the processes of a tree (:meth:`env`)."""
        if not self.port:
            raise RuntimeError("the tape proxy is not started")
        return f"http://{self.host}:{self.port}/{self._token}"

    def base_url(self, label: str) -> str:
        """``<proxy_url>/u/<label>``: use it where ``label``'s base URL went."""
        return f"{self.proxy_url}{LABEL_ROUTE}{quote(label, safe='')}"

    def env(self) -> dict[str, str]:
        """``{"DSH_TAPE_PROXY": proxy_url}``: set it where a tree's processes (and the
        codex and claude-code providers among them) should find this tape."""
        return {"DSH_TAPE_PROXY": self.proxy_url}

    def transport(self, label: str) -> TapeTransport:
        """An httpx transport for a model client of this process whose base URL is
        :meth:`base_url` of ``label``: it records and replays on this tape as the proxy
        does, with no hop through the proxy (close it with the client)."""
        return TapeTransport(self, label, self.base_url(label), self.upstreams.get(label))

    def tool_tape(self) -> ToolTape:
        """``ctx.tool_tape`` for the agents of this process: their tool calls reach the
        tape by a direct call (no HTTP, no sender thread), written by the same writer
        as the proxy's routes."""
        return ToolTape(route=self.tool_call)

    def start(self) -> Self:
        """Open the tape, bind and serve in a background thread; returns ``self``.
        :class:`TapeError` when the tape cannot be read or written."""
        if self.port or self._fd is not None:
            raise RuntimeError("the tape proxy is already started")
        self._open_tape()
        return BackgroundServer.start(self)

    def close(self, timeout: float = 10.0) -> None:
        """End every connection, stop the thread, close the tape. Idempotent."""
        try:
            BackgroundServer.close(self, timeout)
        finally:
            self._close_tape()

    def start_error(self, failure: BaseException | None) -> Exception:
        """:class:`TapeError` naming why the proxy could not start."""
        return TapeError(f"the tape proxy failed to start: {failure}")

    def __repr__(self) -> str:
        where = f"{self.host}:{self.port}" if self.port else "not started"
        return f"<TapeProxy {self.mode} {self.directory} {where}>"

    # -- the server thread ----------------------------------------------------------

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """Holds the HTTP client for the upstreams open while the proxy serves."""
        timeout = httpx.Timeout(self._timeout, connect=30.0)
        async with httpx.AsyncClient(timeout=timeout) as client:  # HTTPS_PROXY as the client would
            self._http = client
            yield

    async def on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Answer the requests of one connection until it ends or asks to close."""
        while True:
            try:
                request = await read_request(reader)
            except BadRequest as exc:
                body = error_body(400, "bad_request", f"tape proxy: {exc}")
                await write_whole(writer, 400, body, "application/json", keep_alive=False)
                return
            if request is None:
                return
            try:
                await self._handle(request, writer)
            except (ConnectionError, OSError):
                raise
            except Exception as exc:  # a bug, or a tape line of the wrong shape
                self.errors.append(exc)
                message = f"tape proxy error: {type(exc).__name__}: {exc}"
                body = error_body(500, "tape_proxy_error", redact_text(message))
                await write_whole(writer, 500, body, "application/json", keep_alive=False)
                return
            if not request.keep_alive:
                return

    async def _handle(self, request: Request, writer: asyncio.StreamWriter) -> None:
        route = parse_target(request.target, self._token)
        if isinstance(route, RouteError):
            kind = "not_found" if route.status == 404 else "bad_request"
            body = error_body(route.status, kind, redact_path(route.message))
            await write_whole(
                writer, route.status, body, "application/json", keep_alive=request.keep_alive
            )
        elif route.tools:
            await self._tool(request, writer)
        elif self.mode == "record":
            await self._forward(route.label, route.rest, request, writer, route.upstream)
        elif self.mode == "resume":
            if not await self._replay(route.label, route.rest, request, writer, resuming=True):
                await self._forward(route.label, route.rest, request, writer, route.upstream)
        else:
            await self._replay(route.label, route.rest, request, writer)

    # -- record -----------------------------------------------------------------------

    async def _forward(
        self,
        label: str,
        rest: str,
        request: Request,
        writer: asyncio.StreamWriter,
        upstream: str | None = None,
    ) -> None:
        keep = request.keep_alive
        upstream = upstream or self.upstreams.get(label)
        if upstream is None:
            message = f"tape proxy: no upstream for label {label!r}"
            await write_whole(
                writer,
                404,
                error_body(404, "not_found", message),
                "application/json",
                keep_alive=keep,
            )
            return
        headers = [(k, v) for k, v in request.headers if k.lower() not in HOP_HEADERS]
        headers.append(("accept-encoding", "identity"))
        assert self._http is not None
        client = self._http
        outgoing = client.build_request(
            request.method, upstream.rstrip("/") + rest, headers=headers, content=request.body
        )
        try:
            response = await client.send(outgoing, stream=True)
        except httpx.HTTPError as exc:
            message = redact_text(
                f"tape proxy: the upstream {label!r} failed: {type(exc).__name__}: {exc}"
            )
            await write_whole(
                writer,
                502,
                error_body(502, "bad_gateway", message),
                "application/json",
                keep_alive=keep,
            )
            return
        body = bytearray()
        try:
            content_type = response.headers.get("content-type", "")
            back = [("content-type", content_type)] if content_type else []
            back += [(k, response.headers[k]) for k in PASS_BACK if k in response.headers]
            head = head_bytes(response.status_code, back, keep_alive=keep)
            async for chunk in response.aiter_bytes():
                if chunk:
                    body += chunk
                    await write_chunk(writer, chunk, prefix=head)
                    head = b""
            await write_chunk(writer, b"", prefix=head)
        except httpx.HTTPError:
            writer.transport.abort()  # the client sees the upstream's break as its own
            raise ConnectionResetError("the upstream broke mid-response") from None
        finally:
            await response.aclose()
        self.record_exchange(
            label,
            request.method,
            rest,
            parse_body(request.body),
            response.status_code,
            content_type,
            bytes(body),
        )

    # -- replay -----------------------------------------------------------------------

    async def _replay(
        self,
        label: str,
        rest: str,
        request: Request,
        writer: asyncio.StreamWriter,
        *,
        resuming: bool = False,
    ) -> bool:
        """Answer from the tape (True); else, resuming, answer nothing (False: go
        live), or answer 409 with the divergence."""
        value = parse_body(request.body)
        answer = self.answer_from_tape(label, request.method, rest, value, resuming=resuming)
        if answer is None:
            return False
        await write_whole(
            writer, answer.status, answer.body, answer.content_type, keep_alive=request.keep_alive
        )
        return True

    # -- tools ------------------------------------------------------------------------

    async def _tool(self, request: Request, writer: asyncio.StreamWriter) -> None:
        """The tool route over HTTP, for the other processes of the tree (see
        :meth:`tool_call`)."""
        keep = request.keep_alive
        try:
            call = json.loads(request.body or b"{}")
        except ValueError:
            call = None
        if request.method != "POST" or not isinstance(call, dict):
            body = error_body(400, "bad_request", "tape proxy: POST a JSON object here")
            await write_whole(writer, 400, body, "application/json", keep_alive=keep)
            return
        status, answer = self.tool_call(call)
        data = json.dumps(answer, ensure_ascii=False).encode()
        await write_whole(writer, status, data, "application/json", keep_alive=keep)
