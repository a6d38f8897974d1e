"""The code behind :mod:`dsh.testing.mcp_server` (its docstring says what it is)."""

from __future__ import annotations

import argparse
import base64
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import anyio
from mcp.server.mcpserver import Context, Image, MCPServer
from mcp_types import CallToolResult, TextContent

__all__ = ["FAIL_START_MESSAGE", "build_server", "main", "serve_http"]

FAIL_START_MESSAGE = "dsh test MCP server: failing on purpose (--fail-start)"
"""What ``--fail-start`` writes to stderr before exiting with status 3."""

# A 1x1 transparent PNG.
_PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="
)


def build_server(aliases: Sequence[str] = ()) -> MCPServer:
    """The test server, with an echoing tool for each name in ``aliases``."""
    server: MCPServer = MCPServer("dsh-test-mcp", version="0.1.0", log_level="WARNING")

    @server.tool(description="Add two numbers.")
    def add(a: float, b: float) -> float:
        total = a + b
        return int(total) if total.is_integer() else total

    @server.tool(description="Say the text back.")
    def echo(text: str) -> str:
        return text

    @server.tool(description="Always fails, with the given message.")
    def fail(message: str = "the tool failed on purpose") -> CallToolResult:
        return CallToolResult(content=[TextContent(text=message)], is_error=True)

    @server.tool(description="Wait for the given number of seconds.")
    async def sleep(seconds: float) -> str:
        await anyio.sleep(seconds)
        return f"slept {seconds:g}"

    @server.tool(description="A caption and a 1x1 PNG image.")
    def picture() -> list[TextContent | Image]:
        return [TextContent(text="a tiny picture:"), Image(data=_PIXEL, format="png")]

    @server.tool(description="The value of an environment variable in the server process.")
    def env(name: str) -> str:
        return os.environ.get(name, "<unset>")

    @server.tool(description="The value of an HTTP request header (<none> over stdio).")
    def header(name: str, ctx: Context) -> str:
        headers = ctx.headers or {}
        for key, value in headers.items():
            if key.lower() == name.lower():
                return value
        return "<none>"

    @server.tool(description="The server's process id.")
    def pid() -> int:
        return os.getpid()

    @server.tool(description="Start a sleeping child process that outlives the call.")
    def spawn_sleeper(detach: bool = False) -> int:
        child = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(600)"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=detach,
        )
        return child.pid

    for alias in aliases:
        server.add_tool(_echo, name=alias, description=f"Echo (registered as {alias!r}).")
    return server


def _echo(text: str) -> str:
    return text


def _free_socket(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.setblocking(False)
    return sock


@asynccontextmanager
async def serve_http(
    host: str = "127.0.0.1", port: int = 0, *, aliases: Sequence[str] = (), sse: bool = False
) -> AsyncIterator[str]:
    """Serve the test server over streamable HTTP in this process; yields its URL
    (``http://<host>:<port>/mcp``) once it accepts connections, stops on exit.
    ``sse``: the older HTTP+SSE transport instead (URL ``.../sse``)."""
    import uvicorn

    mcp = build_server(aliases)
    app = mcp.sse_app(host=host) if sse else mcp.streamable_http_app(host=host)
    sock = _free_socket(host, port)
    bound = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, [sock])
            with anyio.fail_after(10):
                while not server.started:
                    await anyio.sleep(0.01)
            try:
                yield f"http://{host}:{bound}/{'sse' if sse else 'mcp'}"
            finally:
                server.should_exit = True
    finally:
        sock.close()


async def _serve_http_forever(host: str, port: int, aliases: Sequence[str]) -> None:
    async with serve_http(host, port, aliases=aliases) as url:
        print(f"listening on {url}", flush=True)
        await anyio.sleep_forever()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the test server (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m dsh.testing.mcp_server")
    parser.add_argument("--alias", action="append", default=[], help="add an echo tool NAME")
    parser.add_argument("--fail-start", action="store_true", help="exit at once with status 3")
    parser.add_argument("--hang-start", action="store_true", help="never answer")
    parser.add_argument("--http", metavar="HOST:PORT", help="serve streamable HTTP instead")
    args = parser.parse_args(argv)
    if args.fail_start:
        print(FAIL_START_MESSAGE, file=sys.stderr, flush=True)
        return 3
    if args.hang_start:
        while True:
            time.sleep(3600)
    if args.http:
        host, _, port = str(args.http).rpartition(":")
        anyio.run(_serve_http_forever, host or "127.0.0.1", int(port or 0), args.alias)
        return 0
    build_server(args.alias).run("stdio")
    return 0
