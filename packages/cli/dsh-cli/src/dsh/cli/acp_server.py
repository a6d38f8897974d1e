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
    import asyncio

    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=_STDIN_LIMIT)
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(protocol_in, "rb", buffering=0)
    )
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, os.fdopen(protocol_out, "wb", buffering=0)
    )
    return reader, asyncio.StreamWriter(transport, protocol, None, loop)


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
            finally:
                await conn.close()
                await agent.aclose()
    except (PresetError, ConfigError) as exc:
        print(f"dsh acp: {exc}", file=sys.stderr)
        return 2
    finally:
        writer.close()
    return 0


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dsh-cli")
    except PackageNotFoundError:
        return "0"
