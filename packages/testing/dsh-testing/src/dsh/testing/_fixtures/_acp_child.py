"""``dsh acp`` in a child process with an ACP client (the ``acp`` SDK, this package's
``acp`` extra) on its stdio, as an editor starts it."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import anyio

if TYPE_CHECKING:
    from acp import Client
    from acp.client.connection import ClientSideConnection
    from acp.connection import StreamObserver

__all__ = ["dsh_acp_child"]


@asynccontextmanager
async def dsh_acp_child(
    client: Client,
    *args: str,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    stderr: IO[Any] | int | None = None,
    exit_bound: float = 15.0,
    observers: Sequence[StreamObserver] = (),
) -> AsyncIterator[tuple[ClientSideConnection, asyncio.subprocess.Process]]:
    """Start ``python -m dsh.cli acp ARGS`` in ``cwd`` (``env``: its whole environment,
    default this process's; ``stderr``: where its stderr goes, default inherited) and
    connect ``client`` to it over its stdio (``observers``: the connection's observers of
    every message); yields the connection and the process.

    On exit the connection and the child's stdin close and the child must exit within
    ``exit_bound`` seconds (a timeout fails the test; the child is killed then)."""
    from acp import connect_to_agent

    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dsh.cli", "acp", *args,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=stderr,
        cwd=cwd, env=None if env is None else dict(env),
    )  # fmt: skip
    assert process.stdin is not None
    assert process.stdout is not None
    conn = connect_to_agent(
        client, process.stdin, process.stdout, observers=list(observers) or None
    )
    try:
        yield conn, process
    finally:
        with anyio.CancelScope(shield=True):
            await conn.close()
            process.stdin.close()
            try:
                with anyio.fail_after(exit_bound):
                    await process.wait()
            finally:
                if process.returncode is None:
                    process.kill()
                    await process.wait()
