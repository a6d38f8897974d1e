"""ASGI middleware in front of a dsh server's routes (``dsh a2a``, ``dsh mcp --http``):
the Host/Origin allow-list and the request body cap (with the idle limit on a body
that stops arriving).

* :class:`HostGuard` answers ``403`` to a request whose ``Host`` is not in the
  allow-list, or whose ``Origin`` (when present) is not an http(s) origin on an allowed
  host (nor one of the explicitly allowed origins). On loopback this is what stops DNS
  rebinding: a page of ``http://attacker.example`` whose name now resolves to
  127.0.0.1 sends ``Host: attacker.example:8000`` and an ``Origin`` of its own.
* :class:`BodyLimit` answers ``413`` as soon as ``Content-Length`` is over the cap (the
  body is never read), and when a body without one (chunked) streams past it (counted
  while receiving, never buffered beyond the cap); ``408`` when the client stops
  sending the body for ``idle`` seconds.

Both answer in plain text and create no task. A ``413`` keeps the connection open
so that a client still sending the body it was refused gets to read the answer: the
server's HTTP protocol (``dsh a2a``'s) reads and discards the rest, within bounds.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from starlette.exceptions import HTTPException

__all__ = ["LOOPBACK_NAMES", "BodyLimit", "HostGuard", "HostPolicy", "host_of"]

Scope = dict[str, Any]
Receive = Any
Send = Any
ASGIApp = Any

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
"""Host names always allowed on a loopback bind (any port); any loopback IP literal is too."""

_SHOWN = 80
"""Characters of a refused header value quoted back in the 403 message."""


def host_of(value: str) -> str | None:
    """The host of a ``Host`` header value (``name[:port]``, ``[v6][:port]``), lowercase,
    without brackets or a trailing dot; None when it is not of that form."""
    value = value.strip().lower()
    if value.startswith("["):
        host, sep, rest = value[1:].partition("]")
        if not sep or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return None
    else:
        host, sep, port = value.partition(":")
        if sep and not port.isdigit():
            return None
    host = host.rstrip(".")
    return host or None


def _is_loopback_ip(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class HostPolicy:
    """Which ``Host`` and ``Origin`` values are accepted.

    ``hosts``: allowed host names (lowercase, no port, no brackets); ``loopback``: any
    loopback IP literal is allowed too; ``origins``: origins allowed besides those on
    an allowed host (``scheme://host[:port]``, lowercase); ``any_host``: no check.
    """

    hosts: frozenset[str]
    origins: frozenset[str] = frozenset()
    loopback: bool = False
    any_host: bool = False

    @classmethod
    def build(
        cls,
        *,
        loopback: bool,
        hosts: Iterable[str] = (),
        origins: Iterable[str] = (),
    ) -> HostPolicy:
        """The policy for a server bound to loopback (``loopback``) or not, with the extra
        ``hosts`` (``--allow-host``; ``*`` turns the check off) and ``origins``
        (``--allow-origin``)."""
        names = {name.strip().lower().strip("[]").rstrip(".") for name in hosts}
        any_host = "*" in names
        names.discard("*")
        names.discard("")
        if loopback:
            names |= LOOPBACK_NAMES
        return cls(
            hosts=frozenset(names),
            origins=frozenset(normalize_origin(origin) for origin in origins),
            loopback=loopback,
            any_host=any_host,
        )

    def allows_host(self, host: str) -> bool:
        """True when ``host`` (from :func:`host_of`) may be served."""
        return self.any_host or host in self.hosts or (self.loopback and _is_loopback_ip(host))

    def allows_origin(self, origin: str) -> bool:
        """True when a request carrying ``Origin: origin`` may be served."""
        if self.any_host:
            return True
        normalized = normalize_origin(origin)
        if normalized in self.origins:
            return True
        parts = urlsplit(normalized)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return False
        return self.allows_host(parts.hostname.rstrip("."))

    def describe(self) -> str:
        """One line for the startup message."""
        if self.any_host:
            return "host check: off"
        shown = sorted(self.hosts)
        return "allowed hosts: " + ", ".join(shown) + (" and loopback IPs" if self.loopback else "")


def normalize_origin(origin: str) -> str:
    """``origin`` lowercase, without a trailing slash."""
    return origin.strip().lower().rstrip("/")


async def _refuse(send: Send, status: int, text: str, *, close: bool = True) -> None:
    body = text.encode("utf-8", "replace") + b"\n"
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
    ]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value).decode("latin-1")
    return None


def _shown(value: str) -> str:
    return repr(value if len(value) <= _SHOWN else value[:_SHOWN] + "...")


class HostGuard:
    """ASGI middleware: refuse (403) a request whose ``Host`` or ``Origin`` the policy
    does not allow, before anything else sees it (``server``: the command the refusal
    names, e.g. ``dsh a2a``)."""

    def __init__(self, app: ASGIApp, policy: HostPolicy, *, server: str) -> None:
        self._app = app
        self._policy = policy
        self._server = server

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or self._policy.any_host:
            await self._app(scope, receive, send)
            return
        refusal = self._check(scope)
        if refusal is None:
            await self._app(scope, receive, send)
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
        else:
            await _refuse(send, 403, refusal)

    def _check(self, scope: Scope) -> str | None:
        raw_host = _header(scope, b"host")
        if raw_host is None:
            return f"{self._server}: a Host header is required"
        host = host_of(raw_host)
        if host is None or not self._policy.allows_host(host):
            return (
                f"{self._server}: Host {_shown(raw_host)} is not allowed (a DNS rebinding"
                f" guard); start {self._server} with --allow-host NAME to serve it under"
                " another name"
            )
        origin = _header(scope, b"origin")
        if origin is not None and not self._policy.allows_origin(origin):
            return (
                f"{self._server}: Origin {_shown(origin)} is not allowed; start"
                f" {self._server} with --allow-origin ORIGIN to accept requests from it"
            )
        return None


class BodyLimit:
    """ASGI middleware: request bodies of at most ``max_bytes`` (413 beyond), and no
    silence longer than ``idle`` seconds while a body is being received (408);
    ``server`` names the command in the answer."""

    def __init__(self, app: ASGIApp, max_bytes: int, idle: float, *, server: str) -> None:
        self._app = app
        self._max = max_bytes
        self._idle = idle
        self._server = server

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        length = _header(scope, b"content-length")
        if length is not None and length.strip().isdigit() and int(length) > self._max:
            text = self._too_large(f"Content-Length {int(length)}")
            await _refuse(send, 413, text, close=False)
            return
        received = 0
        complete = False
        answered = False
        started = False

        async def guarded_send(message: dict[str, Any]) -> None:
            nonlocal started
            if answered:
                return  # we refused the request already: whatever the app says is moot
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        async def guarded_receive() -> dict[str, Any]:
            nonlocal received, complete, answered
            if complete:
                return dict(await receive())  # waiting for a disconnect: no limit
            try:
                message = dict(await asyncio.wait_for(receive(), self._idle))
            except TimeoutError:
                if not started:
                    answered = True
                    await _refuse(
                        send,
                        408,
                        f"{self._server}: the request body stopped arriving for {self._idle:g} s"
                        " (--idle-timeout)",
                    )
                raise HTTPException(408) from None
            if message["type"] != "http.request":
                complete = True
                return message
            received += len(message.get("body", b""))
            if received > self._max:
                if not started:
                    answered = True
                    text = self._too_large(f"a body of over {self._max} bytes")
                    await _refuse(send, 413, text, close=False)
                raise HTTPException(413)
            complete = not message.get("more_body", False)
            return message

        try:
            await self._app(scope, guarded_receive, guarded_send)
        except HTTPException as exc:
            if not answered or exc.status_code not in (408, 413):
                raise

    def _too_large(self, what: str) -> str:
        return (
            f"{self._server}: {what} is over the request body limit of {self._max} bytes"
            " (--max-body-bytes)"
        )
