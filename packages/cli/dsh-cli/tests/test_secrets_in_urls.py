"""Credentials in ``OPENAI_BASE_URL`` (``http://user:pass@host/v1``) never reach the
terminal, the ``--json`` stream or the session files of a real ``dsh run``, while the
messages still say which host failed."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest

from dsh.testing.model_servers import OpenAIChatServer
from dsh.testing.processes import run_cli

pytestmark = pytest.mark.timeout(60)

SECRET = "s3cret-Pa55"


def clean_env(**extra: str) -> dict[str, str]:
    drop = ("OPENAI_", "DEEPSEEK_", "ANTHROPIC_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(extra)
    return env


def closed_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def dsh_run(tmp_path: Path, base_url: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return run_cli(
        "dsh.cli",
        ["run", *flags, "--sessions-dir", "sessions", "hello"],
        cwd=tmp_path,
        env=clean_env(OPENAI_BASE_URL=base_url),
        timeout=50,
    )


def session_text(tmp_path: Path) -> str:
    files = list((tmp_path / "sessions").rglob("*.jsonl"))
    assert files, f"no session written under {tmp_path / 'sessions'}"
    return "".join(path.read_text() for path in files)


@pytest.mark.parametrize("flags", [(), ("--json",), ("--verbose",)])
def test_an_unreachable_base_url_with_credentials_is_reported_without_them(
    tmp_path: Path, flags: tuple[str, ...]
) -> None:
    port = closed_port()
    done = dsh_run(tmp_path, f"http://user:{SECRET}@127.0.0.1:{port}/v1", *flags)
    assert done.returncode == 1, done.stderr
    output = done.stdout + done.stderr
    assert SECRET not in output
    assert SECRET not in session_text(tmp_path)
    where = f"http://***@127.0.0.1:{port}/v1"
    if flags == ("--json",):
        events = [json.loads(line) for line in done.stdout.splitlines()]
        notice = next(e for e in events if e["type"] == "notice")["text"]
        assert f"at {where} (OPENAI_BASE_URL is set)" in notice
        error = next(e for e in events if e["type"] == "answer")["error"]
        assert error.startswith(f"model call failed: cannot connect to {where}/chat/completions")
    else:
        assert f"at {where} (OPENAI_BASE_URL is set)" in done.stderr
        assert f"cannot connect to {where}/chat/completions" in done.stderr


def test_an_http_error_names_the_server_without_its_credentials(tmp_path: Path) -> None:
    with OpenAIChatServer(api_key="the-right-key") as srv:
        host = srv.api_base.split("://", 1)[1]
        done = dsh_run(tmp_path, f"http://user:{SECRET}@{host}", "--json")
    assert done.returncode == 1, done.stderr
    assert SECRET not in done.stdout + done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    error = next(e for e in events if e["type"] == "answer")["error"]
    assert f"HTTP 401 Unauthorized from http://***@{host}/chat/completions" in error
