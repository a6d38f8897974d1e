"""A process spoken to in raw JSON lines: :class:`JsonLinesProcess`."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["JsonLinesProcess"]


class JsonLinesProcess:
    """``argv`` started in ``cwd`` with raw bytes in (:meth:`send`) and its stdout's
    lines parsed as JSON out (:attr:`lines`, :meth:`receive`, :meth:`answer`): for
    testing a JSON-RPC-over-stdio server (``dsh acp``, ``dsh mcp``) with what no
    well-behaved client would send. Its stderr goes to ``stderr_path``."""

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
        with stderr_path.open("ab") as stderr:
            self.process = subprocess.Popen(
                list(argv),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                cwd=cwd,
            )
        self.lines: queue.Queue[Any] = queue.Queue()
        """Each line of its stdout, parsed; None once stdout closed."""
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.next_id = first_id
        """The id of the last request :meth:`request` sent."""

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            self.lines.put(json.loads(raw))
        self.lines.put(None)

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
        """The next parsed line (fails if stdout closed first, with its stderr)."""
        message = self.lines.get(timeout=timeout)
        assert message is not None, f"{self.name} closed its stdout: {self.stderr()}"
        return message

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

    def close(self) -> int:
        """Close its stdin and wait (15 s, then kill); its exit status."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()
        try:
            return self.process.wait(timeout=15)
        finally:
            if self.process.returncode is None:
                self.process.kill()
                self.process.wait()
            self.reader.join(timeout=5)
