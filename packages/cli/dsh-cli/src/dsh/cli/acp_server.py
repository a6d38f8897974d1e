"""``dsh acp [--preset FILE] [--sessions-dir DIR]``: serve a dsh agent over ACP on stdio.

The agent comes from the preset (``--preset``, else ``./dsh.toml``, else the
standard preset); each ACP session is a fresh agent of that preset (see
:mod:`dsh.cli.acp_agent`). With a sessions directory (``--sessions-dir`` or the
preset's ``[agent] sessions_dir``) sessions persist as JSONL and
``session/load`` works.

stdout belongs to the protocol alone: before anything else runs, the protocol's
pipes move to private file descriptors (not inherited by tool processes),
fd 1 becomes a copy of stderr and fd 0 reads ``/dev/null``, so a stray
``print`` or a tool's output can never corrupt the JSON-RPC stream. Logs go to
stderr.

Start-up is kept short: the command module imports nothing heavy, and the
server imports only ``acp`` and ``dsh.core`` (both needed to answer
``initialize``) and the small agent-side base ``dsh.subagent_acp.agent_side``;
see ``docs/performance.md``, "ACP cold start".
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio

    from dsh.core import Preset

__all__ = ["acp_command"]

_STDIN_LIMIT = 64 * 1024 * 1024


def acp_command(args: argparse.Namespace) -> int:
    """Serve until the client closes stdin. Exit status 2 when the preset is unusable."""
    from dsh.cli.presets import resolve_preset
    from dsh.core import PresetError

    try:
        preset = resolve_preset(args.preset)
    except (PresetError, OSError) as exc:
        print(f"dsh acp: {exc}", file=sys.stderr)
        return 2
    if preset.agent.model is None:
        print(
            f"dsh acp: no model is configured in {preset.source}; add an [agent.model] table"
            ' to the preset (e.g. adapter = "openai", model = "deepseek-chat"), or'
            ' adapter = "scripted" for an offline scripted model',
            file=sys.stderr,
        )
        return 2
    protocol_in, protocol_out = _claim_stdio()
    import asyncio
    import logging

    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="dsh acp: %(message)s")
    try:
        return asyncio.run(_serve(preset, args.sessions_dir, protocol_in, protocol_out))
    except KeyboardInterrupt:
        return 130


def _claim_stdio() -> tuple[int, int]:
    """Move the protocol's stdin/stdout to private fds; fd 0 ← /dev/null, fd 1 → stderr."""
    protocol_in = os.dup(0)  # os.dup: not inheritable (PEP 446)
    protocol_out = os.dup(1)
    sys.stdout.flush()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    return protocol_in, protocol_out


async def _streams(
    protocol_in: int, protocol_out: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Streams over the protocol fds: the event loop for pipes and sockets; a reader
    thread and plain writes for anything else (``dsh acp < requests.jsonl``)."""
    import asyncio

    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=_STDIN_LIMIT)
    if _pollable(protocol_in):
        await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(protocol_in, "rb", buffering=0)
        )
    else:
        _pump_from_thread(loop, protocol_in, reader)
    if _pollable(protocol_out):
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, os.fdopen(protocol_out, "wb", buffering=0)
        )
    else:
        transport, protocol = _FileWriteTransport(protocol_out), asyncio.streams.FlowControlMixin()
    return reader, asyncio.StreamWriter(transport, protocol, None, loop)


def _pollable(fd: int) -> bool:
    """Pipes and sockets can be watched by the event loop; files and /dev/null cannot."""
    import stat

    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def _pump_from_thread(
    loop: asyncio.AbstractEventLoop, fd: int, reader: asyncio.StreamReader
) -> None:
    import threading

    def pump() -> None:
        try:
            while chunk := os.read(fd, 65536):
                loop.call_soon_threadsafe(reader.feed_data, chunk)
        except OSError:
            pass
        finally:
            loop.call_soon_threadsafe(reader.feed_eof)

    threading.Thread(target=pump, name="dsh-acp-stdin", daemon=True).start()


class _FileWriteTransport(asyncio.WriteTransport):
    """Blocking writes to a non-pollable fd (a regular file): each message goes out whole."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fd = fd
        self._closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        self._closing = True

    def can_write_eof(self) -> bool:
        return False


async def _serve(preset: Preset, sessions_dir: str | None, protocol_in: int, out: int) -> int:
    from acp.core import AgentSideConnection

    from dsh.cli.acp_agent import DshAcpAgent
    from dsh.core import ConfigError, Context, PresetError

    reader, writer = await _streams(protocol_in, out)
    try:
        async with Context.open(preset, sessions_dir=sessions_dir) as ctx:
            agent = DshAcpAgent(ctx, version=_version())
            conn = AgentSideConnection(agent, writer, reader, listening=False)
            try:
                await conn.listen()
                await _drain_requests(_EOF_DRAIN_SECONDS)
            finally:
                await conn.close()
                await agent.aclose()
    except (PresetError, ConfigError) as exc:
        print(f"dsh acp: {exc}", file=sys.stderr)
        return 2
    finally:
        writer.close()
    return 0


_EOF_DRAIN_SECONDS = 2.0


async def _drain_requests(timeout: float) -> None:
    """After stdin EOF, let requests already received answer (bounded by ``timeout``)
    before the connection closes and cancels the rest: a client that writes its
    requests and closes stdin (``dsh acp < requests.jsonl``) still gets its answers."""
    in_flight = {
        task
        for task in asyncio.all_tasks()
        if task.get_name() == "acp.Connection.request" and not task.done()
    }
    if in_flight:
        await asyncio.wait(in_flight, timeout=timeout)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dsh-cli")
    except PackageNotFoundError:
        return "0"
