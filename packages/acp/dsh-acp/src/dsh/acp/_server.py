"""``dsh acp``: serve a dsh agent over ACP on stdio.

The agent comes from the preset (``--preset``, else ``./dsh.toml`` once trusted or
with ``--trust``, else the standard preset); each ACP session is a fresh agent of that preset (see
:mod:`dsh.acp._agent`). With a sessions directory (``--sessions-dir`` or the
preset's ``[agent] sessions_dir``) sessions persist as JSONL and
``session/load`` works.

An editor starts ``dsh acp`` and talks to it, so it never exits on a
configuration problem before answering ``initialize``: a preset that cannot be
loaded (no model, an unknown plugin...) becomes the error of ``session/new``,
with the message saying what to fix.

stdout belongs to the protocol alone: before anything else runs, the protocol's
pipes move to private file descriptors (not inherited by tool processes), fd 1
becomes a copy of stderr and fd 0 reads ``/dev/null``, so a stray ``print`` or a
tool's output can never corrupt the JSON-RPC stream. Logs go to stderr.

Ending: when a live client's input ends (a pipe or socket closes) every running
turn is cancelled at once and the process exits after tearing down what it
started; a file fed on stdin (``dsh acp < requests.jsonl``) is a script instead,
whose requests are answered before exit (a turn still running 2 s after the end
of input is cancelled and answers with its stop reason). SIGTERM (and SIGINT)
cancel every turn, dispose every delegation (their process trees included) and
exit with status 143 (130).

Start-up is kept short: the command module imports nothing heavy, and the server
imports ``acp`` and ``dsh.core`` (both needed to answer ``initialize``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dsh.acp._signals import StopSignals
    from dsh.core import Preset

__all__ = ["serve_command"]

_STDIN_LIMIT = 64 * 1024 * 1024


def serve_command(args: argparse.Namespace) -> int:
    """``dsh acp``: serve until the client closes stdin (or a signal). Exit status 0;
    128 + the signal on SIGINT, SIGTERM or SIGHUP (130, 143, 129)."""
    from dsh.core import PresetError
    from dsh.core.plugins import UntrustedPresetError
    from dsh.core.tracing import TRACING_SWITCH_ENV

    if args.otel:  # the switch: every context opened here traces (and children inherit it)
        os.environ[TRACING_SWITCH_ENV] = "1"
    preset: Preset | None = None
    problem: str | None = None
    try:
        preset = _resolve_preset(args.preset, trust=args.trust)
    except UntrustedPresetError as exc:  # nothing of it ran: say how to trust it
        problem = (
            f"{exc} An editor that starts dsh acp: run the dsh trust command above in a"
            " terminal, or add \"--trust\" to the agent's args in the editor's settings."
        )
    except (PresetError, OSError) as exc:
        problem = str(exc)
    if preset is not None and preset.agent.model is None:
        from dsh.acp._requests import EDITOR_NO_MODEL_HELP
        from dsh.core import model_from_env

        if model_from_env() is None:  # the rule of `dsh run` (dsh.core.model_from_env)
            problem = f"{preset.source}: {EDITOR_NO_MODEL_HELP}"
    protocol_in, protocol_out = _claim_stdio()
    import logging

    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="dsh acp: %(message)s")
    if problem is not None:
        print(f"dsh acp: {problem} (serving anyway: session requests will say so)", file=sys.stderr)
    options = _Options(
        sessions_dir=args.sessions_dir,
        record=getattr(args, "record", None),
        max_line_bytes=args.max_line_bytes,
        max_sessions=args.max_sessions,
        session_idle=args.session_idle,
        workspace=args.workspace,
    )
    from dsh.acp._signals import StopSignals

    # SIGINT, SIGTERM, SIGHUP: the first ends the input (below); a second one, or the
    # shutdown taking over a second, ends the process whatever the loop is doing.
    interrupt = StopSignals(message="dsh acp: interrupted")
    with interrupt.installed():
        return asyncio.run(_serve(preset, problem, options, protocol_in, protocol_out, interrupt))


def _resolve_preset(value: str | None, *, trust: bool) -> Preset:
    """``--preset`` as given, else a trusted ``./dsh.toml``, else the named preset
    ``standard`` (which dsh-cli ships)."""
    from dsh.core import find_preset, load_named_preset

    return find_preset(value, trust=trust) or load_named_preset("standard")


class _Options:
    def __init__(
        self,
        *,
        sessions_dir: str | None,
        max_line_bytes: int,
        max_sessions: int,
        session_idle: float,
        workspace: str = "own",
        record: str | None = None,
    ) -> None:
        self.workspace = workspace
        self.sessions_dir = sessions_dir
        self.record = record
        self.max_line_bytes = max_line_bytes
        self.max_sessions = max_sessions
        self.session_idle = session_idle


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


async def _serve(
    preset: Preset | None,
    problem: str | None,
    options: _Options,
    protocol_in: int,
    out: int,
    interrupt: StopSignals,
) -> int:
    from dsh.acp import serve
    from dsh.acp._agent import DshAcpAgent
    from dsh.core import Context

    reader, writer = await _streams(protocol_in, out)
    received: list[int] = []

    def on_signal(number: int) -> None:
        # end the input: the turns are cancelled, what they started is disposed, exit
        received.append(number)
        reader.feed_eof()

    signals = interrupt.calling(on_signal)
    signals.__enter__()
    session = _Serving(
        serve, reader, writer, options, cancel_at_end=_pollable(protocol_in), received=received
    )
    try:
        if preset is None:
            await session.run(DshAcpAgent(None, problem=problem))
        else:
            try:
                async with Context.open(
                    preset, sessions_dir=options.sessions_dir, record=options.record
                ) as ctx:
                    agent = DshAcpAgent(
                        ctx,
                        version=_version(),
                        max_sessions=options.max_sessions,
                        session_idle=options.session_idle,
                        workspace=options.workspace,
                    )
                    try:
                        await session.run(agent)
                    finally:
                        agent.cancel_all("dsh acp is shutting down")
                        await agent.aclose()
            except Exception as exc:  # the preset's plugins could not load: say so on session/new
                if session.started:
                    raise
                print(
                    f"dsh acp: {exc} (serving anyway: session requests will say so)",
                    file=sys.stderr,
                )
                await session.run(DshAcpAgent(None, problem=str(exc)))
    finally:
        signals.__exit__(None, None, None)
        writer.close()
    return 128 + received[0] if received else 0


class _Serving:
    """One run of the protocol loop over the process's streams."""

    def __init__(
        self,
        serve: Any,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        options: _Options,
        *,
        cancel_at_end: bool,
        received: list[int],
    ) -> None:
        self._serve = serve
        self._reader = reader
        self._writer = writer
        self._options = options
        self._cancel_at_end = cancel_at_end
        self._received = received
        self.started = False

    async def run(self, agent: Any) -> None:
        self.started = True
        lost: list[bool] = []

        def output_lost() -> None:  # the client stopped reading: nobody gets the answers
            lost.append(True)
            agent.cancel_all("the ACP client stopped reading")

        async def at_end() -> None:
            gone = bool(self._cancel_at_end or self._received or lost)
            if gone:
                agent.cancel_all("the ACP client went away")  # end its turns at once
            if not await _drain_requests(_EOF_DRAIN_SECONDS) and not gone:
                # a turn still running: cancel it, so it answers with its stop reason
                agent.cancel_all(f"dsh acp's input ended {_EOF_DRAIN_SECONDS:g} s ago")
                await _drain_requests(_EOF_DRAIN_SECONDS)

        await self._serve(
            agent,
            self._reader,
            self._writer,
            max_line_bytes=self._options.max_line_bytes,
            on_cancel_request=getattr(agent, "cancel_request", None),
            at_end_of_input=at_end,
            on_output_lost=output_lost,
        )


_EOF_DRAIN_SECONDS = 2.0


async def _drain_requests(timeout: float) -> bool:
    """Let the handlers of requests already received return (bounded by ``timeout``;
    their answers are written by :func:`dsh.acp.serve` before the connection closes
    and cancels the rest): a script fed from a file gets its answers; after a live
    client left, the cancelled turns end at once. True if none is left running.

    The handlers are the ``acp`` connection's tasks named ``acp.Connection.request``
    (0.12: handler and answer; 1.0: the handler, the answer in a task of its own)."""
    in_flight = {
        task
        for task in asyncio.all_tasks()
        if task.get_name() == "acp.Connection.request" and not task.done()
    }
    if not in_flight:
        return True
    _, running = await asyncio.wait(in_flight, timeout=timeout)
    return not running


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dsh-acp")
    except PackageNotFoundError:
        return "0"
