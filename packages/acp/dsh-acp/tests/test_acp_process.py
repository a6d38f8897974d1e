"""``dsh acp`` as a process: registered through the ``dsh.commands`` entry points (so
``dsh acp`` and ``python -m dsh.acp`` are one command), stdin that is not a pipe, and the
stop signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

from dsh.testing.fixtures import HANG_RULE, SCRIPTED_PRESET, keyed_preset, plugin_rows

pytestmark = pytest.mark.timeout(90)

BOUND = 3.0
"""Seconds from the signal to the exit that a test accepts (the promise is ~1 s; the
machine is shared and loaded)."""

INITIALIZE = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}


def dsh_acp(*args: str) -> list[str]:
    """The argv of ``dsh acp ARGS`` as the tests run it."""
    return [sys.executable, "-m", "dsh.cli", "acp", *args]


def write_preset(tmp_path: Path, text: str = SCRIPTED_PRESET) -> Path:
    preset = tmp_path / "p.toml"
    preset.write_text(text, encoding="utf-8")
    return preset


def test_dsh_acp_is_the_acp_entry_point_of_dsh_commands() -> None:
    found = {point.name: point.value for point in entry_points(group="dsh.commands")}
    assert found.get("acp") == "dsh.acp._command:command"
    listing = subprocess.run(
        [sys.executable, "-m", "dsh.cli", "--help"], capture_output=True, text=True, timeout=60
    )
    assert listing.returncode == 0, listing.stderr
    assert "serve an agent over the Agent Client Protocol on stdio" in listing.stdout
    assert "unavailable" not in listing.stdout


def test_python_m_dsh_acp_has_the_options_of_dsh_acp() -> None:
    def options(argv: list[str]) -> list[str]:
        done = subprocess.run([*argv, "--help"], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return [word for word in done.stdout.split() if word.startswith("--")]

    via_dsh = options(dsh_acp())
    assert via_dsh == options([sys.executable, "-m", "dsh.acp"])
    for option in ("--preset", "--sessions-dir", "--trust", "--otel", "--max-line-bytes"):
        assert option in via_dsh
    assert "--max-sessions" in via_dsh
    assert "--session-idle" in via_dsh


def test_python_m_dsh_acp_answers_requests_read_from_a_file(tmp_path: Path) -> None:
    preset = write_preset(tmp_path)
    requests = tmp_path / "requests.jsonl"
    requests.write_text(json.dumps(INITIALIZE) + "\n")
    out = tmp_path / "out.jsonl"
    with open(requests, "rb") as stdin, open(out, "wb") as stdout:
        done = subprocess.run(
            [sys.executable, "-m", "dsh.acp", "--preset", str(preset)],
            stdin=stdin,
            stdout=stdout,
            stderr=subprocess.PIPE,
            timeout=30,
        )
    assert done.returncode == 0, done.stderr
    answers = [json.loads(line) for line in out.read_text().splitlines()]
    assert answers[0]["result"]["agentInfo"]["name"] == "dsh"


def test_acp_with_stdin_on_dev_null_exits_promptly(tmp_path: Path) -> None:
    preset = write_preset(tmp_path)
    with open(os.devnull, "rb") as devnull:
        done = subprocess.run(
            dsh_acp("--preset", str(preset)), stdin=devnull, capture_output=True, timeout=30
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout == b""


def test_acp_answers_requests_read_from_a_file(tmp_path: Path) -> None:
    preset = write_preset(tmp_path)
    requests = tmp_path / "requests.jsonl"
    new_session = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "session/new",
        "params": {"cwd": str(tmp_path), "mcpServers": []},
    }
    requests.write_text(json.dumps(INITIALIZE) + "\n" + json.dumps(new_session) + "\n")
    out = tmp_path / "out.jsonl"
    with open(requests, "rb") as stdin, open(out, "wb") as stdout:
        done = subprocess.run(
            dsh_acp("--preset", str(preset)),
            stdin=stdin,
            stdout=stdout,
            stderr=subprocess.PIPE,
            timeout=30,
        )
    assert done.returncode == 0, done.stderr
    answers = {a["id"]: a for a in map(json.loads, out.read_text().splitlines())}
    assert answers[0]["result"]["protocolVersion"] == 1
    assert answers[1]["result"]["sessionId"]


def request(request_id: int, method: str, params: dict[str, Any]) -> str:
    """One JSON-RPC request line."""
    message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    return json.dumps(message) + "\n"


def test_a_turn_still_running_when_a_file_ends_is_cancelled_and_answered(
    tmp_path: Path,
) -> None:
    preset = write_preset(tmp_path, keyed_preset(HANG_RULE))
    argv = dsh_acp("--preset", str(preset), "--sessions-dir", str(tmp_path / "sessions"))
    session = {"cwd": str(tmp_path), "mcpServers": []}
    created = subprocess.run(
        argv,
        input=(json.dumps(INITIALIZE) + "\n" + request(1, "session/new", session)).encode(),
        capture_output=True,
        timeout=60,
    )
    assert created.returncode == 0, created.stderr
    session_id = json.loads(created.stdout.splitlines()[1])["result"]["sessionId"]
    requests = tmp_path / "requests.jsonl"
    hang = {"sessionId": session_id, "prompt": [{"type": "text", "text": "hang"}]}
    requests.write_text(
        json.dumps(INITIALIZE)
        + "\n"
        + request(1, "session/load", {"sessionId": session_id, **session})
        + request(2, "session/prompt", hang)
    )
    out = tmp_path / "out.jsonl"
    with open(requests, "rb") as stdin, open(out, "wb") as stdout:
        done = subprocess.run(argv, stdin=stdin, stdout=stdout, stderr=subprocess.PIPE, timeout=60)
    assert done.returncode == 0, done.stderr
    answers = {a["id"]: a for a in map(json.loads, out.read_text().splitlines()) if "id" in a}
    assert "result" in answers[1], answers
    assert answers[2]["result"]["stopReason"] == "cancelled", answers


def test_dsh_acp_honours_sighup_and_sigterm(tmp_path: Path) -> None:
    preset = write_preset(tmp_path, SCRIPTED_PRESET + plugin_rows("dsh-tool-shell"))
    for signum, status in ((signal.SIGHUP, 129), (signal.SIGTERM, 143)):
        proc = subprocess.Popen(
            dsh_acp("--preset", str(preset)),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            assert proc.stdin is not None
            assert proc.stdout is not None
            proc.stdin.write(json.dumps(INITIALIZE).encode() + b"\n")
            proc.stdin.flush()
            assert b'"id":0' in proc.stdout.readline()  # serving
            started = time.monotonic()
            proc.send_signal(signum)
            _, err = proc.communicate(timeout=30)
            took = time.monotonic() - started
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        print(f"\ndsh acp, {signal.Signals(signum).name}: exit after {took:.3f} s")
        assert proc.returncode == status, err
        assert took < BOUND
        assert b"Traceback" not in err
