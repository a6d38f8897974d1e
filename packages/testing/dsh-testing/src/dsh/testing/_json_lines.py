"""A process spoken to in raw JSON lines: :class:`JsonLinesProcess` (its stdout read on
a thread) and :class:`ThreadlessJsonLinesProcess` (read by the caller, so the pipe's
read end can really be closed)."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import select
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["JsonLinesProcess", "ThreadlessJsonLinesProcess"]


class _JsonLinesClient:
    """What both kinds share: ``argv`` started in ``cwd`` with raw bytes in
    (:meth:`send`, :meth:`request`) and its stderr in ``stderr_path``; a subclass says
    where its stdout goes (:meth:`_stdout`, :meth:`_started`) and how its lines are
    read (:meth:`receive`)."""

    def __init__(
        self,
        argv: Sequence[str],
        cwd: Path,
        stderr_path: Path,
        *,
        name: str,
        first_id: int = 0,
    ) -> None:
        self.name = name
        """How failures name the process (``"dsh acp"``)."""
        self.stderr_path = stderr_path
        stdout = self._stdout()
        try:
            with stderr_path.open("ab") as stderr:
                self.process = subprocess.Popen(
                    list(argv),
                    stdin=subprocess.PIPE,
                    stdout=stdout,
                    stderr=stderr,
                    cwd=cwd,
                )
        finally:
            if stdout != subprocess.PIPE:
                os.close(stdout)  # a pipe's write end: the child has its own copy
        self._started()
        self.next_id = first_id
        """The id of the last request :meth:`request` sent."""

    def _stdout(self) -> int:
        """Where the process's stdout goes: :data:`subprocess.PIPE`, or the write end of
        a pipe (closed here once the child has it)."""
        raise NotImplementedError

    def _started(self) -> None:
        """Once the process runs: start reading its stdout, if that takes a thread."""

    def send(self, data: bytes) -> None:
        """Write ``data`` to its stdin as it is."""
        assert self.process.stdin is not None
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def request(self, method: str, params: Any = None) -> int:
        """Send a JSON-RPC request (one line) with the next id; returns the id."""
        self.next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(json.dumps(message).encode() + b"\n")
        return self.next_id

    def receive(self, timeout: float = 30.0) -> Any:
        """The next parsed line of its stdout."""
        raise NotImplementedError

    def answer(self, request_id: Any, timeout: float = 30.0) -> Any:
        """The response to ``request_id`` (anything before it is skipped)."""
        deadline = time.monotonic() + timeout
        while True:
            message = self.receive(max(deadline - time.monotonic(), 0.01))
            if "method" not in message and message.get("id") == request_id:
                return message

    def stderr(self) -> str:
        """What it wrote to stderr so far."""
        return self.stderr_path.read_text(errors="replace")

    def rss_kib(self) -> int:
        """Its resident memory (KiB, ``/proc``)."""
        with open(f"/proc/{self.process.pid}/status") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def _stdout_done(self) -> None:
        """After the process ended: let go of its stdout."""

    def close(self) -> int:
        """Close its stdin and wait (15 s, then kill); its exit status."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                self.process.stdin.close()
        try:
            return self.process.wait(timeout=15)
        finally:
            if self.process.returncode is None:
                self.process.kill()
                self.process.wait()
            self._stdout_done()


class JsonLinesProcess(_JsonLinesClient):
    """``argv`` started in ``cwd`` with raw bytes in (:meth:`send`) and its stdout's
    lines parsed as JSON out (:attr:`lines`, :meth:`receive`, :meth:`answer`): for
    testing a JSON-RPC-over-stdio server (``dsh acp``, ``dsh mcp``) with what no
    well-behaved client would send. Its stderr goes to ``stderr_path``."""

    lines: queue.Queue[Any]
    """Each line of its stdout, parsed; None once stdout closed."""

    def _stdout(self) -> int:
        return subprocess.PIPE

    def _started(self) -> None:
        self.lines = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            self.lines.put(json.loads(raw))
        self.lines.put(None)

    def receive(self, timeout: float = 30.0) -> Any:
        """The next parsed line (fails if stdout closed first, with its stderr)."""
        message = self.lines.get(timeout=timeout)
        assert message is not None, f"{self.name} closed its stdout: {self.stderr()}"
        return message

    def _stdout_done(self) -> None:
        self.reader.join(timeout=5)


class ThreadlessJsonLinesProcess(_JsonLinesClient):
    """:class:`JsonLinesProcess` with no reader thread: :meth:`receive` reads its stdout
    pipe itself (select + read), so :meth:`close_output` really closes the client's read
    end (a thread blocked in read() would keep it open), as a client that stops reading
    does."""

    out: int | None
    """The read end of its stdout; None once :meth:`close_output` closed it."""

    def _stdout(self) -> int:
        self.out, write_end = os.pipe()
        self.buffer = b""
        return write_end

    def receive(self, timeout: float = 30.0) -> Any:
        """The next parsed line (TimeoutError after ``timeout`` seconds; fails if stdout
        closed first, with its stderr)."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            assert self.out is not None
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.out], [], [], left)[0]:
                raise TimeoutError(f"no message from {self.name} within {timeout} s")
            chunk = os.read(self.out, 65536)
            assert chunk, f"{self.name} closed its stdout: {self.stderr()}"
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def close_output(self) -> None:
        """Close the client's read end of its stdout (its stdin stays open)."""
        if self.out is not None:
            os.close(self.out)
            self.out = None

    def _stdout_done(self) -> None:
        self.close_output()
