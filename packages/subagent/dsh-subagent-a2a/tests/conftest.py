"""Fixtures: A2A agents in processes of their own on 127.0.0.1 (one written with the SDK
alone, and ``dsh a2a``), and an open context with a parent agent that registers ``a2a``
providers pointing at them."""

from __future__ import annotations

import re
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from dsh.subagent_a2a import A2AProvider, A2AProviderConfig
from dsh.testing.fixtures import (
    ProviderRig,
    ServingProcess,
    keyed_preset_file,
    start_serving,
)

HERE = Path(__file__).resolve().parent
START_BOUND = 90.0

Agent2Agent = ServingProcess
"""An A2A agent process: its URL and its stderr."""


def launch(
    argv: list[str], ready: re.Pattern[str], stderr_path: Path, env: dict[str, str] | None = None
) -> Agent2Agent:
    """Start ``argv``, wait until its stderr matches ``ready`` (group 1: the URL)."""
    return start_serving(argv, ready, stderr_path, env=env, bound=START_BOUND)


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


class Rig(ProviderRig):
    """Registers providers in an open context and runs prompts through them."""

    def register(self, url: str, **fields: Any) -> str:
        """Register (once per name) an ``a2a`` provider for ``url``; returns its name."""
        config = A2AProviderConfig(url=url, **fields)
        if self.runtime.get_provider(config.name) is None:
            self.runtime.register_provider(A2AProvider(config))
        return config.name

    start = ProviderRig.start_on
    run = ProviderRig.run_on


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
    async with Rig.scripted(tmp_path) as made:
        yield made


@pytest.fixture
def keyed_preset(tmp_path: Path) -> Path:
    """A ``dsh a2a`` preset: "hang" hangs, "fail" fails, else ``Done: <prompt>``."""
    return keyed_preset_file(tmp_path / "served.toml")


@pytest.fixture
def sdk_agent(tmp_path: Path) -> Iterator[Agent2Agent]:
    """The SDK-only agent, streaming."""
    agent = start_sdk_agent(tmp_path)
    try:
        yield agent
    finally:
        agent.stop()
