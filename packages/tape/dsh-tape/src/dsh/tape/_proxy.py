"""The recording proxy: :class:`TapeProxy` (the format is in the package docstring)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import os
import secrets
from collections import deque
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, Literal, Self
from urllib.parse import quote

import httpx

from dsh.tape._format import (
    FORMAT_VERSION,
    TAPE_FILE,
    Divergence,
    TapeError,
    call_number,
    canonical,
    conversation_key,
    parse_body,
    pretty,
    read_tape,
    redact_path,
    redact_text,
    similarity,
    unified_diff,
)
from dsh.tape._http import (
    HEAD_LIMIT,
    BadRequest,
    Request,
    error_body,
    head_bytes,
    read_request,
    write_chunk,
    write_whole,
)
from dsh.tape._normalise import Normalisation, answer_from_tape, answer_to_tape, normalised
from dsh.tape._route import LABEL_ROUTE, RouteError, parse_target
from dsh.tape._tools import ToolBook, tool_line
from dsh.tape.serving import BackgroundServer

__all__ = ["TapeProxy"]

Mode = Literal["record", "replay", "resume"]

# Not forwarded upstream: hop-by-hop headers, and what httpx sets itself.
_HOP = {
    "host",
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "content-length",
    "te",
    "trailer",
    "upgrade",
    "accept-encoding",
}
# Response headers passed back to the client besides content-type.
_PASS_BACK = ("retry-after", "x-request-id", "request-id")


class TapeProxy(BackgroundServer):
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
        if mode not in ("record", "replay", "resume"):
            raise ValueError(f'mode must be "record", "replay" or "resume", not {mode!r}')
        super().__init__(host)
        self.directory = Path(directory)
        """The tape directory (the tape is its ``tape.jsonl``)."""
        self.mode: Mode = mode
        self.upstreams = dict(upstreams or {})
        """Record mode: label -> the real API's base URL."""
        self.header: dict[str, Any] = {}
        """The tape's header line: the one written (record) or read (replay)."""
        self.divergence: Divergence | None = None
        """Replay mode: the first request the tape did not hold (None: none yet)."""
        self.recorded = 0
        """Exchanges written (record mode)."""
        self.replayed = 0
        """Requests answered from the tape (replay mode)."""
        self.replay_tools = replay_tools
        """Replay mode: answer tool calls from the tape (else they run again)."""
        self.normalise = normalise
        """What of a request changes legitimately between runs (a temporary folder, the
        date): rewritten before a request is written or matched (:class:`Normalisation`)."""
        self.tools = ToolBook()
        """The recorded tool calls (replay and resume modes)."""
        self.tools_recorded = 0
        """Tool calls written (record and resume modes)."""
        self.errors: list[Exception] = []
        """Unexpected errors while answering (each answered HTTP 500 when it could be)."""
        self._meta = dict(meta or {})
        self._token = secrets.token_urlsafe(18)
        self._timeout = timeout
        self._fd: int | None = None
        self._seq = 0
        self._index: dict[tuple[str, str, str, str], deque[dict[str, Any]]] = {}
        self._unused: list[dict[str, Any]] = []
        self._http: httpx.AsyncClient | None = None

    # -- public ---------------------------------------------------------------------

    @property
    def tape_path(self) -> Path:
        """``<directory>/tape.jsonl``."""
        return self.directory / TAPE_FILE

    @property
    def remaining(self) -> int:
        """Replay mode: recorded exchanges not answered yet."""
        return len(self._unused)

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

    def start(self) -> Self:
        """Open the tape, bind and serve in a background thread; returns ``self``.
        :class:`TapeError` when the tape cannot be read or written."""
        if self.port or self._fd is not None:
            raise RuntimeError("the tape proxy is already started")
        if self.mode == "replay":
            self._load()
        elif self.mode == "resume":
            if self.tape_path.exists():
                self._load()
            self._open_for_recording()
        else:
            self._open_for_recording()
        return super().start()

    def close(self, timeout: float = 10.0) -> None:
        """End every connection, stop the thread, close the tape. Idempotent."""
        try:
            super().close(timeout)
        finally:
            fd, self._fd = self._fd, None
            if fd is not None:
                os.close(fd)

    def start_error(self, failure: BaseException | None) -> Exception:
        """:class:`TapeError` naming why the proxy could not start."""
        return TapeError(f"the tape proxy failed to start: {failure}")

    def __repr__(self) -> str:
        where = f"{self.host}:{self.port}" if self.port else "not started"
        return f"<TapeProxy {self.mode} {self.directory} {where}>"

    # -- the tape -------------------------------------------------------------------

    def _open_for_recording(self) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.tape_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        except OSError as exc:
            raise TapeError(f"cannot write the tape {self.tape_path}: {exc.strerror}") from None
        created = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        header = {"tape": FORMAT_VERSION, "created": created, **self._meta}
        if self.mode == "resume":
            header["resumed"] = True
            self.header = {**header, **self.header}  # the first recording's meta wins
        else:
            self.header = header
        self._append(header)

    def _append(self, entry: Mapping[str, Any]) -> None:
        """One line, one write (``O_APPEND``: lines of concurrent writers never mix)."""
        data = (json.dumps(entry, ensure_ascii=False) + "\n").encode()
        assert self._fd is not None
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    def _load(self) -> None:
        tape = read_tape(self.directory)
        self.header = tape.header
        self.tools = ToolBook(tape.tools)
        for entry in tape.exchanges:
            key = self._key(entry["label"], entry["method"], entry["path"], entry.get("request"))
            self._index.setdefault(key, deque()).append(entry)
            self._unused.append(entry)

    @staticmethod
    def _key(label: str, method: str, path: str, request: Any) -> tuple[str, str, str, str]:
        return (label, method, path, pretty(canonical(request)))

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
        headers = [(k, v) for k, v in request.headers if k.lower() not in _HOP]
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
            back += [(k, response.headers[k]) for k in _PASS_BACK if k in response.headers]
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
        value = normalised(self.normalise, parse_body(request.body))
        answer = answer_to_tape(self.normalise, bytes(body).decode("utf-8", "replace"))
        self._seq += 1
        self._append(
            {
                "v": FORMAT_VERSION,
                "seq": self._seq,
                "label": label,
                "method": request.method,
                "path": redact_path(rest),
                "request": value,
                "status": response.status_code,
                "content_type": content_type,
                "body": redact_text(answer),
                "conversation": conversation_key(value),
                "call": call_number(value),
            }
        )
        self.recorded += 1

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
        keep = request.keep_alive
        value = normalised(self.normalise, parse_body(request.body))
        path = redact_path(rest)
        queue = self._index.get(self._key(label, request.method, path, value))
        if queue:
            entry = queue.popleft()
            self._unused.remove(entry)
            self.replayed += 1
            body = answer_from_tape(self.normalise, str(entry.get("body") or "")).encode()
            content_type = str(entry.get("content_type") or "application/octet-stream")
            await write_whole(writer, int(entry["status"]), body, content_type, keep_alive=keep)
            return True
        if resuming:
            return False
        divergence = self._diverge(label, request.method, path, value)
        if self.divergence is None:
            self.divergence = divergence
        body = error_body(409, "tape_divergence", divergence.describe())
        await write_whole(writer, 409, body, "application/json", keep_alive=keep)
        return True

    # -- tools ------------------------------------------------------------------------

    async def _tool(self, request: Request, writer: asyncio.StreamWriter) -> None:
        """The tool route: ``{"phase": "call"}`` before a tool runs, ``{"phase":
        "result"}`` after (see :mod:`dsh.core.tapes`)."""
        keep = request.keep_alive
        try:
            call = json.loads(request.body or b"{}")
        except ValueError:
            call = None
        if request.method != "POST" or not isinstance(call, dict):
            body = error_body(400, "bad_request", "tape proxy: POST a JSON object here")
            await write_whole(writer, 400, body, "application/json", keep_alive=keep)
            return
        answer: dict[str, Any]
        if call.get("phase") == "result":
            if self._fd is not None:
                self._seq += 1
                self._append(tool_line(self._seq, FORMAT_VERSION, call))
                self.tools_recorded += 1
            answer = {"ok": True}
        elif self.mode == "record":
            answer = {"action": "record", "mode": "record"}
        elif self.mode == "replay" and self.header.get("tape") == 1:
            answer = {"action": "run"}  # a version 1 tape holds no tool calls
        else:
            line = self.tools.take(call)
            if line is not None:
                if self.mode == "resume" or self.replay_tools:
                    answer = {"action": "result", "result": line.get("result") or {}}
                else:
                    answer = {"action": "run"}
            elif self.mode == "resume":
                answer = {"action": "record"}
            else:
                divergence = self.tools.diverge(call)
                if self.divergence is None:
                    self.divergence = divergence
                body = error_body(409, "tape_divergence", divergence.describe())
                await write_whole(writer, 409, body, "application/json", keep_alive=keep)
                return
        data = json.dumps(answer, ensure_ascii=False).encode()
        await write_whole(writer, 200, data, "application/json", keep_alive=keep)

    def _diverge(self, label: str, method: str, path: str, value: Any) -> Divergence:
        conversation, call = conversation_key(value), call_number(value)
        candidates = [
            e
            for e in self._unused
            if e["label"] == label and e["method"] == method and e["path"] == path
        ]
        same = [e for e in candidates if e.get("conversation") == conversation]
        same_call = [e for e in same if e.get("call") == call]
        closest: dict[str, Any] | None = None
        if same_call:
            closest = same_call[0]
        elif candidates:
            text = pretty(canonical(value))
            pool = same or candidates
            closest = max(pool, key=lambda e: similarity(pretty(canonical(e.get("request"))), text))
        if closest is None:
            return Divergence(label, path, conversation, call, "")
        diff = unified_diff(closest.get("request"), value)
        return Divergence(label, path, conversation, call, diff, closest_seq=closest.get("seq"))
