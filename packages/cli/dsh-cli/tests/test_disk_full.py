"""``dsh run`` and ``dsh acp`` on a full disk (issue 21 item 3): a real 64 KiB tmpfs
as ``--sessions-dir``, filled to ENOSPC. No traceback, no torn or 0-byte session file;
the turn fails with one clear message, and once there is room the conversation goes
on and loads whole."""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from dsh.core import SessionStore
from dsh.testing.disk import fill_up, small_tmpfs
from dsh.testing.processes import run_cli

pytestmark = pytest.mark.timeout(120)

FULL = "no space left on device while saving session"

BIG_REPLY = """
[agent.model]
adapter = "scripted"
[[agent.model.options.replies]]
text = "{text}"
"""

DELEGATES = """
[agent.model]
adapter = "scripted"

[[agent.model.options.replies]]
tool_calls = [ { name = "subagent", arguments = { description = "d", prompt = "p" } } ]

[[agent.model.options.replies]]
text = "lead done: {tool_results}"

[[plugin]]
name = "dsh-subagent-spawn-in-process"

[[plugin]]
name = "dsh-tool-subagent"
config = { provider = "spawn", tool_name = "subagent", max_depth = 2 }
"""

ECHO = """
[agent.model]
adapter = "scripted"
[[agent.model.options.replies]]
text = "echo: {prompt}"
"""


def dsh(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_cli("dsh.cli", args, cwd=cwd, timeout=60)


def run(preset: Path, sessions: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return dsh("run", "--preset", str(preset), "--sessions-dir", str(sessions), "go", cwd=cwd)


def every_session_loads(sessions: Path) -> list[str]:
    """Ids of the session files (each one loads, whole lines only, no 0-byte file)."""
    store = SessionStore(sessions)
    ids = store.ids()
    for session_id in ids:
        assert store.path_for(session_id).stat().st_size > 0, session_id
        assert store.load(session_id).torn_tail is None, session_id
    return ids


def test_dsh_run_says_one_line_and_exits_1_and_the_session_stays_whole(tmp_path: Path) -> None:
    preset = tmp_path / "big.toml"
    preset.write_text(BIG_REPLY.format(text="z" * 6000))
    with small_tmpfs(tmp_path / "disk") as disk:
        sessions = disk / "sessions"
        sessions.mkdir()
        filler = fill_up(disk, leave=4096)  # room for the header page, not for the reply
        done = run(preset, sessions, tmp_path)
        assert done.returncode == 1, done.stderr
        assert "Traceback" not in done.stderr
        failures = [line for line in done.stderr.splitlines() if FULL in line]
        assert len(failures) == 1, done.stderr
        assert failures[0].startswith("dsh run: turn ended error: no space left on device")
        assert "the session file was left as it was" in failures[0]
        [session_id] = every_session_loads(sessions)
        assert "z" * 6000 not in (sessions / f"{session_id}.jsonl").read_text()

        filler.unlink()
        done = run(preset, sessions, tmp_path)
        assert done.returncode == 0, done.stderr
        assert len(every_session_loads(sessions)) == 2


def test_dsh_run_leaves_no_empty_child_session_when_its_header_is_refused(tmp_path: Path) -> None:
    preset = tmp_path / "delegates.toml"
    preset.write_text(DELEGATES)
    with small_tmpfs(tmp_path / "disk") as disk:
        sessions = disk / "sessions"
        sessions.mkdir()
        fill_up(disk, leave=4096)  # the lead's file takes the last page; the child gets none
        done = run(preset, sessions, tmp_path)
        assert "Traceback" not in done.stderr, done.stderr
        assert "no space left on device while creating session" in done.stdout, done.stdout
        assert done.returncode == 0, done.stderr  # the lead saw the failed delegation
        [lead] = every_session_loads(sessions)  # no 0-byte child file
        turn_end = SessionStore(sessions).load(lead).events[-1]
        assert turn_end.type == "turn/end"
        assert turn_end.data["stop_reason"] == "completed"


class Acp:
    """``python -m dsh.cli acp`` on pipes: raw JSON-RPC lines."""

    def __init__(self, cwd: Path, preset: Path, sessions: Path) -> None:
        self.stderr_path = cwd / f"acp-{time.monotonic_ns()}.stderr"
        sessions_dir = ["--sessions-dir", str(sessions)]
        with open(self.stderr_path, "wb") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "dsh.cli", "acp", "--preset", str(preset), *sessions_dir],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                cwd=cwd,
            )
        self.buffer = b""
        self.next_id = 0

    def call(self, method: str, params: Any, timeout: float = 60.0) -> Any:
        """Send a request; its response (notifications before it are skipped)."""
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.next_id += 1
        message = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        self.process.stdin.flush()
        deadline = time.monotonic() + timeout
        out = self.process.stdout.fileno()
        while True:
            while b"\n" not in self.buffer:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([out], [], [], left)[0]:
                    raise TimeoutError(f"no answer to {method} within {timeout} s")
                chunk = os.read(out, 65536)
                assert chunk, f"dsh acp closed its stdout: {self.stderr()}"
                self.buffer += chunk
            line, self.buffer = self.buffer.split(b"\n", 1)
            answer = json.loads(line)
            if "method" not in answer and answer.get("id") == self.next_id:
                return answer

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def close(self) -> None:
        if self.process.stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                self.process.stdin.close()
        try:
            self.process.wait(timeout=20)
        finally:
            if self.process.returncode is None:
                self.process.kill()
                self.process.wait()
            if self.process.stdout is not None:
                self.process.stdout.close()


def prompt(acp: Acp, session_id: str, text: str) -> Any:
    params = {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}
    return acp.call("session/prompt", params)


def test_dsh_acp_answers_an_error_and_loads_the_session_once_there_is_room(
    tmp_path: Path,
) -> None:
    preset = tmp_path / "echo.toml"
    preset.write_text(ECHO)
    with small_tmpfs(tmp_path / "disk") as disk:
        sessions = disk / "sessions"
        acp = Acp(tmp_path, preset, sessions)
        try:
            assert "result" in acp.call("initialize", {"protocolVersion": 1})
            new = acp.call("session/new", {"cwd": str(tmp_path), "mcpServers": []})
            session_id = new["result"]["sessionId"]
            assert prompt(acp, session_id, "first")["result"]["stopReason"] == "end_turn"

            filler = fill_up(disk)
            failed = prompt(acp, session_id, "second " + "y" * 6000)
            assert "error" in failed, failed
            assert FULL in failed["error"]["message"], failed
            assert "the session file was left as it was" in failed["error"]["message"]
            assert failed["error"]["data"]["stopReason"] == "error"
            assert acp.process.poll() is None
            every_session_loads(sessions)

            filler.unlink()
            assert prompt(acp, session_id, "third")["result"]["stopReason"] == "end_turn"
        finally:
            acp.close()
        assert "Traceback" not in acp.stderr(), acp.stderr()

        events = SessionStore(sessions).load(session_id).events
        ends = [e.data["stop_reason"] for e in events if e.type == "turn/end"]
        assert ends == ["completed", "error", "completed"]
        again = Acp(tmp_path, preset, sessions)
        try:
            assert "result" in again.call("initialize", {"protocolVersion": 1})
            params = {"cwd": str(tmp_path), "sessionId": session_id, "mcpServers": []}
            loaded = again.call("session/load", params)
            assert "result" in loaded, loaded
            answer = prompt(again, session_id, "fourth")
            assert answer["result"]["stopReason"] == "end_turn", answer
        finally:
            again.close()
        assert "Traceback" not in again.stderr(), again.stderr()
        texts = [
            e.data["content"][0]["text"]
            for e in SessionStore(sessions).load(session_id).events
            if e.type == "user/message"
        ]
        assert texts == ["first", "second " + "y" * 6000, "third", "fourth"]
