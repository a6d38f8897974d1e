"""Starting one process for a :class:`~dsh.subprocess.ProcessPool`: spawn it, let the
transport connect and handshake, and on any failure stop it and say why (what every
pooled transport's ``start`` function does)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TypeVar

import anyio

from dsh.subagent import StartFailed
from dsh.subprocess._errors import ProcessStartError
from dsh.subprocess._pooled import PooledProcess, Starting
from dsh.subprocess._process import ChildProcess
from dsh.subprocess._sandbox import Sandbox, SandboxUnavailableError
from dsh.subprocess._supervisor import RunTag

__all__ = ["start_pooled_process"]

P = TypeVar("P", bound=PooledProcess)


async def start_pooled_process(
    starting: Starting,
    argv: Sequence[str],
    *,
    provider: str,
    what: str,
    env: Mapping[str, str],
    cwd: str,
    sandbox: Sandbox | None,
    connect: Callable[[ChildProcess], P],
    handshake: Callable[[P], Awaitable[None]],
    describe: Callable[[P, Exception], str],
    term_grace: float,
    hint: str = "",
) -> P:
    """Spawn ``argv`` (a :class:`~dsh.subprocess.RunTag` of its own, in ``sandbox``),
    :meth:`~dsh.subprocess.Starting.track` it, wrap it with ``connect`` and await
    ``handshake`` on the result, which is returned.

    A command that cannot start raises :class:`~dsh.subagent.StartFailed` (with
    ``hint`` appended, unless the sandbox is what failed). A handshake that fails or
    is cancelled stops the process first (``term_grace``); a failure then raises
    :class:`~dsh.subagent.StartFailed` with ``describe(process, error)`` (a ``StartFailed``'s
    own message as it is) and the process's stderr tail, headed ``{provider} stderr``.
    """
    try:
        child = await ChildProcess.start(
            argv, env=env, cwd=cwd, what=what, tag=RunTag(), sandbox=sandbox
        )
    except ProcessStartError as exc:
        message = str(exc)
        if hint and not isinstance(exc, SandboxUnavailableError):
            message = f"{message}; {hint}"
        raise StartFailed(message) from exc
    starting.track(child)
    process = connect(child)
    try:
        await handshake(process)
    except BaseException as exc:
        with anyio.CancelScope(shield=True):
            await process.aclose(eof_grace=0.0, term_grace=term_grace)
        if not isinstance(exc, Exception):
            raise
        message = exc.message if isinstance(exc, StartFailed) else describe(process, exc)
        tail = child.stderr_tail.text(1500)
        if tail:
            message += f"\n{provider} stderr (last lines):\n{tail}"
        raise StartFailed(message) from exc
    return process
