"""The listening socket and the uvicorn server of a dsh HTTP server."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator

import uvicorn

from dsh.http_guard._binding import BindError

__all__ = ["QuietServer", "listen"]


def listen(host: str, port: int) -> socket.socket:
    """A non-blocking, non-inheritable socket listening on ``host:port`` (port 0: a free
    one); :class:`BindError` naming the address when it cannot."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    # proto IPPROTO_TCP, not 0: asyncio turns Nagle off (TCP_NODELAY) only on accepted
    # sockets whose proto says TCP; with Nagle on, every response after the first on a
    # kept-alive connection waits for the client's delayed ACK (about 40 ms)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(128)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise BindError(f"cannot listen on {host}:{port}: {exc}") from None
    sock.set_inheritable(False)
    return sock


class QuietServer(uvicorn.Server):
    """uvicorn's server without its signal handling (a dsh server installs its own, and
    must finish its teardown instead of re-raising the signal): stop it with
    ``should_exit = True``."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """No signal handling of uvicorn's own."""
        yield
