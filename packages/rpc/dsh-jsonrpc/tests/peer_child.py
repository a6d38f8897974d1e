"""The other end for the peer tests, in a child process: a dsh.jsonrpc Peer on stdio.

``serve``      answers ``echo``, ``sleep`` (async, for concurrency), ``fail`` (an error
               answer with data), ``boom`` (a handler bug), ``die`` (exits without an
               answer), ``ask-back`` (two notifications, then a request to the parent
               whose answer it returns); anything else is -32601.
``raw HEX``    writes the bytes HEX (hex-encoded), then waits for its input to end.
``deaf``       closes its stdin, says ``deaf`` (a notification), then waits.
``record``     answers ``echo`` and first writes every line it got to stderr.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from dsh.jsonrpc import METHOD_NOT_FOUND, Peer, RemoteError


async def stdio() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, sys.stdout
    )
    return reader, asyncio.StreamWriter(transport, protocol, reader, loop)


async def serve(record: bool) -> None:
    reader, writer = await stdio()
    peer: Peer

    async def handle(message: dict[str, Any]) -> Any:
        method, params = message["method"], message.get("params") or {}
        if record:
            sys.stderr.write(f"{message}\n")
            sys.stderr.flush()
        if method == "echo":
            return params
        if method == "sleep":
            await asyncio.sleep(params["seconds"])
            return params
        if method == "fail":
            raise RemoteError(-32001, "nope", {"why": "asked to"})
        if method == "boom":
            raise ValueError("a bug in the handler")
        if method == "die":
            os._exit(3)
        if method == "ask-back":
            await peer.notify("progress", {"n": 1})
            await peer.notify("progress", {"n": 2})
            return await peer.request("parent/ping", params)
        raise RemoteError(METHOD_NOT_FOUND, f"no method {method}")

    peer = Peer(reader, writer, name="the parent", on_request=handle)
    await peer.run()


async def raw(data: bytes) -> None:
    reader, writer = await stdio()
    writer.write(data)
    await writer.drain()
    await reader.read()


async def deaf() -> None:
    _reader, writer = await stdio()
    os.close(0)
    writer.write(b'{"jsonrpc":"2.0","method":"deaf"}\n')
    await writer.drain()
    await asyncio.sleep(60)


def main() -> None:
    mode = sys.argv[1]
    if mode in ("serve", "record"):
        asyncio.run(serve(mode == "record"))
    elif mode == "raw":
        asyncio.run(raw(bytes.fromhex(sys.argv[2])))
    elif mode == "deaf":
        asyncio.run(deaf())


if __name__ == "__main__":
    main()
