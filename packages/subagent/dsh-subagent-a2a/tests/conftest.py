"""Fixtures: A2A agents in processes of their own on 127.0.0.1 (one written with the SDK
alone, and ``dsh a2a``), and an open context with a parent agent that registers ``a2a``
providers pointing at them."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dsh.core import AbortSignal, Agent, Context, parse_preset
from dsh.subagent import SubagentResult, SubagentRun, SubagentRuntime, SubagentStartRequest
from dsh.subagent_a2a import A2AProvider, A2AProviderConfig

HERE = Path(__file__).resolve().parent
START_BOUND = 90.0

KEYED_PRESET = """
[[plugin]]
name = "dsh-testing-keyed-model"

[agent.model]
adapter = "keyed"
[[agent.model.options.rules]]
contains = "hang"
replies = [{ hang = true }]
[[agent.model.options.rules]]
contains = "fail"
replies = [{ error = "the scripted model fails on purpose" }]
[[agent.model.options.default]]
text = "Done: {prompt}"
chunks = 3
"""


@dataclass
class Agent2Agent:
    """An A2A agent process: its URL and its stderr."""

    process: subprocess.Popen[bytes]
    url: str
    stderr_path: Path

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def stop(self, bound: float = 20.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(bound)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        return self.process.returncode


def launch(
    argv: list[str], ready: re.Pattern[str], stderr_path: Path, env: dict[str, str] | None = None
) -> Agent2Agent:
    """Start ``argv``, wait until its stderr matches ``ready`` (group 1: the URL)."""
    with stderr_path.open("wb") as stderr:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=stderr,
            stderr=stderr,
            env={**os.environ, **(env or {})},
            cwd=stderr_path.parent,
            start_new_session=True,
        )
    deadline = time.monotonic() + START_BOUND
    while time.monotonic() < deadline:
        match = ready.search(stderr_path.read_text(errors="replace"))
        if match:
            return Agent2Agent(process, match.group(1), stderr_path)
        if process.poll() is not None:
            break
        time.sleep(0.05)
    process.kill()
    process.wait(5)
    raise AssertionError(f"{argv} did not start:\n{stderr_path.read_text(errors='replace')}")


def start_sdk_agent(tmp: Path, *options: str) -> Agent2Agent:
    """The SDK-only agent (``sdk_agent.py``)."""
    name = "sdk-agent" + "".join(options).replace("-", "_")
    return launch(
        [sys.executable, str(HERE / "sdk_agent.py"), *options],
        re.compile(r"sdk agent listening on (\S+)"),
        tmp / f"{name}.stderr",
    )


def start_dsh_a2a(
    tmp: Path, preset: Path, *options: str, env: dict[str, str] | None = None, name: str = "dsh"
) -> Agent2Agent:
    """``python -m dsh.a2a --preset PRESET --port 0 ...``."""
    return launch(
        [sys.executable, "-m", "dsh.a2a", "--preset", str(preset), "--port", "0", *options],
        re.compile(r"dsh a2a: serving \"[^\"]*\" at (\S+) "),
        tmp / f"{name}.stderr",
        env,
    )


class Rig:
    """Registers providers in an open context and runs prompts through them."""

    def __init__(self, ctx: Context, parent: Agent) -> None:
        self.ctx = ctx
        self.parent = parent
        self.runtime = SubagentRuntime.of(ctx)

    def register(self, url: str, **fields: Any) -> str:
        """Register (once per name) an ``a2a`` provider for ``url``; returns its name."""
        config = A2AProviderConfig(url=url, **fields)
        if self.runtime.get_provider(config.name) is None:
            self.runtime.register_provider(A2AProvider(config))
        return config.name

    async def start(
        self, name: str, prompt: str, signal: AbortSignal | None = None, **fields: Any
    ) -> SubagentRun:
        request = SubagentStartRequest(prompt, self.parent, signal or AbortSignal(), **fields)
        return await self.runtime.start(name, request)

    async def run(self, name: str, prompt: str, **fields: Any) -> SubagentResult:
        run = await self.start(name, prompt, **fields)
        async with run:
            return await run.result


@pytest.fixture(scope="module")
def kit_module() -> Any:
    """This module's helpers, for module-scoped fixtures."""
    return sys.modules[__name__]


@pytest.fixture
def kit() -> Any:
    """This module's helpers (test modules cannot import conftest under importlib mode)."""
    return sys.modules[__name__]


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    """A context (cwd = tmp_path) with a parent agent on the scripted model."""
    preset = parse_preset('[agent.model]\nadapter = "scripted"\n')
    async with Context.open(preset, cwd=tmp_path) as ctx:
        yield Rig(ctx, ctx.agents.create())


@pytest.fixture
def keyed_preset(tmp_path: Path) -> Path:
    """A ``dsh a2a`` preset: "hang" hangs, "fail" fails, else ``Done: <prompt>``."""
    path = tmp_path / "served.toml"
    path.write_text(KEYED_PRESET, encoding="utf-8")
    return path


@pytest.fixture
def sdk_agent(tmp_path: Path) -> Iterator[Agent2Agent]:
    """The SDK-only agent, streaming."""
    agent = start_sdk_agent(tmp_path)
    try:
        yield agent
    finally:
        agent.stop()
