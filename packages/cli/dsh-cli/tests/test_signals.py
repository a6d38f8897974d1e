"""SIGTERM, SIGINT and SIGHUP end ``dsh run`` within a second whatever is running: a
shell command, or a plugin's tool that blocks the event loop with synchronous code
(then a watchdog thread ends the process); a second signal ends it at once. No
traceback, no process left behind (``dsh acp``: dsh-acp's tests)."""

from __future__ import annotations

import contextlib
import os
import pty
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from dsh.testing.model_servers import Hang, OpenAIChatServer

pytestmark = pytest.mark.timeout(90)

BOUND = 3.0
"""Seconds from the signal to the exit that a test accepts (the promise is ~1 s; the
machine is shared and loaded)."""

SHELL_PRESET = """
[agent.model]
adapter = "scripted"
[[agent.model.options.replies]]
tool_calls = [{ name = "shell", arguments = { command = "sleep 61.25" } }]
[[agent.model.options.replies]]
text = "done"

[[plugin]]
name = "dsh-tool-shell"
"""

BLOCK_PRESET = """
[agent.model]
adapter = "scripted"
[[agent.model.options.replies]]
tool_calls = [{{ name = "block", arguments = {{ seconds = 40, spin = {spin} }} }}]
[[agent.model.options.replies]]
text = "the loop was blocked and nobody noticed"

[[plugin]]
name = "dsh-blocking-test"
"""

# A misbehaving plugin, installed for the child process only (an entry point in a
# dist-info directory on PYTHONPATH): its tool sleeps, or spins, on the event loop.
PLUGIN = '''
"""A plugin whose tool blocks the event loop with synchronous code."""
import time

from pydantic import BaseModel

from dsh.core import Plugin, Tool, ToolContext


class Args(BaseModel):
    seconds: float
    spin: bool = False


async def run(args: Args, tctx: ToolContext) -> str:
    print("blocking-now", flush=True, file=__import__("sys").stderr)
    deadline = time.monotonic() + args.seconds
    if args.spin:
        while time.monotonic() < deadline:
            pass
    else:
        time.sleep(args.seconds)
    return "woke"


def apply(ctx, config, effects) -> None:
    effects.add(ctx.tools.register(Tool.from_model("block", "block the loop", Args, run)))


plugin = Plugin("dsh-blocking-test", apply)
'''


def install_plugin(tmp_path: Path) -> Path:
    where = tmp_path / "site"
    info = where / "dsh_blocking_test-0.1.dist-info"
    info.mkdir(parents=True)
    (where / "dsh_blocking_test.py").write_text(PLUGIN)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: dsh-blocking-test\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[dsh.plugins]\ndsh-blocking-test = dsh_blocking_test:plugin\n"
    )
    return where


def child_env(extra_path: Path | None = None) -> dict[str, str]:
    drop = ("OPENAI_", "DEEPSEEK_", "ANTHROPIC_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["TERM"] = "xterm-256color"
    if extra_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (env.get("PYTHONPATH", ""), str(extra_path)) if p
        )
    return env


def sleepers() -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if (proc.info["cmdline"] or [])[:2] == ["sleep", "61.25"]:
                found.append(proc)
    return found


def wait_until(condition: object, timeout: float = 20) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return False


_started: list[subprocess.Popen[bytes]] = []


@pytest.fixture(autouse=True)
def _no_run_left_behind() -> Iterator[None]:
    """A test that failed half-way still ends its ``dsh`` process."""
    yield
    while _started:
        proc = _started.pop()
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


class Piped:
    """``dsh run --yes`` with its output piped; the time from a signal to the exit."""

    def __init__(self, tmp_path: Path, preset: str, env: dict[str, str]) -> None:
        path = tmp_path / "p.toml"
        path.write_text(preset)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dsh.cli", "run", "--yes", "--preset", str(path), "go"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=tmp_path,
        )
        _started.append(self.proc)
        self.err = b""
        self.out = b""

    def wait_for_stderr(self, text: bytes, timeout: float = 20) -> None:
        assert self.proc.stderr is not None
        fd = self.proc.stderr.fileno()
        deadline = time.monotonic() + timeout
        while text not in self.err:
            assert time.monotonic() < deadline, self.err
            if select.select([fd], [], [], 0.1)[0]:
                chunk = os.read(fd, 65536)
                assert chunk, self.err
                self.err += chunk

    def signal_and_time(self, *signums: int, gap: float = 0.05) -> float:
        """Send the signals (``gap`` apart); seconds from the first to the exit."""
        started = time.monotonic()
        for index, signum in enumerate(signums):
            if index:
                time.sleep(gap)
            self.proc.send_signal(signum)
        try:
            out, err = self.proc.communicate(timeout=60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        took = time.monotonic() - started
        self.out, self.err = out, self.err + err
        return took


@pytest.mark.parametrize(
    ("signum", "status"),
    [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129)],
)
def test_a_signal_during_a_shell_command_ends_the_run(
    tmp_path: Path, signum: int, status: int
) -> None:
    run = Piped(tmp_path, SHELL_PRESET, child_env())
    assert wait_until(lambda: sleepers()), "the shell command never started"
    took = run.signal_and_time(signum)
    print(f"\n{signal.Signals(signum).name} during a shell command: exit after {took:.3f} s")
    assert run.proc.returncode == status, run.err
    assert took < BOUND
    assert run.err.decode().strip().endswith("dsh: interrupted")
    assert b"Traceback" not in run.err
    assert run.out == b""
    assert wait_until(lambda: not sleepers(), 5), "the shell command outlived dsh"


def test_sigterm_during_a_long_model_call(tmp_path: Path) -> None:
    # A model server that reads the request and never answers: once it has the
    # request, dsh is started (its signal handlers too) and waiting for the model.
    with OpenAIChatServer(Hang(), api_key="k") as srv:
        env = child_env() | {"OPENAI_BASE_URL": srv.api_base, "OPENAI_API_KEY": "k"}
        run = Piped(tmp_path, 'extends = "standard"\n', env)
        srv.wait_for_requests(1, timeout=120)
        took = run.signal_and_time(signal.SIGTERM)
    print(f"\nSIGTERM during a model call: exit after {took:.3f} s")
    assert run.proc.returncode == 143, run.err
    assert took < BOUND
    assert run.err.decode().strip().endswith("dsh: interrupted")


@pytest.mark.parametrize(
    ("spin", "signums", "status"),
    [
        ("false", (signal.SIGTERM,), 143),  # one signal: the grace period, then out
        ("true", (signal.SIGTERM,), 143),  # a busy loop: the same
        ("false", (signal.SIGINT, signal.SIGINT), 130),  # a second one: at once
        ("true", (signal.SIGHUP, signal.SIGHUP), 129),
    ],
)
def test_a_blocked_event_loop_cannot_keep_dsh_alive(
    tmp_path: Path, spin: str, signums: tuple[int, ...], status: int
) -> None:
    run = Piped(tmp_path, BLOCK_PRESET.format(spin=spin), child_env(install_plugin(tmp_path)))
    run.wait_for_stderr(b"blocking-now")
    time.sleep(0.2)
    took = run.signal_and_time(*signums)
    names = "+".join(signal.Signals(s).name for s in signums)
    print(f"\n{names} while a plugin blocks the loop (spin={spin}): exit after {took:.3f} s")
    assert run.proc.returncode == status, run.err
    assert took < BOUND
    err = run.err.decode()
    assert err.count("dsh: interrupted") == 1, err
    assert "Traceback" not in err
    assert b"nobody noticed" not in run.out


def test_two_ctrl_c_on_a_terminal_while_the_loop_is_blocked(tmp_path: Path) -> None:
    preset = tmp_path / "p.toml"
    preset.write_text(BLOCK_PRESET.format(spin="false"))
    env = child_env(install_plugin(tmp_path))
    argv = [sys.executable, "-m", "dsh.cli", "run", "--yes", "--preset", str(preset), "go"]
    pid, fd = pty.fork()
    if pid == 0:
        try:
            os.chdir(tmp_path)
            os.execve(sys.executable, argv, env)
        finally:
            os._exit(127)
    raw = b""

    def read(timeout: float) -> bool:
        nonlocal raw
        if select.select([fd], [], [], timeout)[0]:
            try:
                data = os.read(fd, 65536)
            except OSError:
                return False
            raw += data
            return bool(data)
        return True

    try:
        deadline = time.monotonic() + 20
        while b"blocking-now" not in raw and time.monotonic() < deadline:
            assert read(0.1), raw
        assert b"blocking-now" in raw, raw
        started = time.monotonic()
        os.write(fd, b"\x03")
        time.sleep(0.05)
        os.write(fd, b"\x03")
        status = None
        while time.monotonic() - started < 30:
            read(0.05)
            done, wait_status = os.waitpid(pid, os.WNOHANG)
            if done:
                status = os.waitstatus_to_exitcode(wait_status)
                break
        took = time.monotonic() - started
        while read(0.05) and select.select([fd], [], [], 0)[0]:
            pass
    finally:
        with contextlib.suppress(ProcessLookupError, ChildProcessError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)
    print(f"\ntwo Ctrl-C 50 ms apart, loop blocked: exit after {took:.3f} s")
    text = raw.decode("utf-8", "replace")
    assert status == 130, text
    assert took < BOUND
    assert "dsh: interrupted" in text
    assert "Traceback" not in text
    assert "KeyboardInterrupt" not in text
