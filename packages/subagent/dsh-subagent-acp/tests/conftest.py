"""Fixtures: an open context with a parent agent, and a helper that registers
``acp`` providers pointing at the mock ACP agent or at a real ``dsh acp``."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from dsh.core import AbortSignal
from dsh.subagent import SubagentResult, SubagentRun
from dsh.subagent_acp import AcpProvider, AcpProviderConfig
from dsh.testing.fixtures import ProviderRig, keyed_preset_file

MOCK_AGENT = ["-m", "dsh.testing.mock_acp_agent"]
DSH_ACP = ["-m", "dsh.cli", "acp"]


def mock_config(mode: str, *extra: str, **fields: Any) -> AcpProviderConfig:
    """A provider config that runs the mock agent in ``mode``."""
    fields.setdefault("name", f"acp-{mode}")
    return AcpProviderConfig(
        command=sys.executable, args=[*MOCK_AGENT, "--mode", mode, *extra], **fields
    )


def dsh_config(preset: Path, **fields: Any) -> AcpProviderConfig:
    """A provider config that runs ``python -m dsh.cli acp --preset PRESET``."""
    fields.setdefault("name", "acp-dsh")
    return AcpProviderConfig(
        command=sys.executable, args=[*DSH_ACP, "--preset", str(preset)], **fields
    )


class Configs:
    """The config helpers, for tests that open their own context (test modules cannot
    import conftest under importlib mode)."""

    mock = staticmethod(mock_config)
    dsh = staticmethod(dsh_config)


@pytest.fixture
def configs() -> type[Configs]:
    """:func:`mock_config` and :func:`dsh_config`, as ``configs.mock`` / ``configs.dsh``."""
    return Configs


class AcpRig(ProviderRig):
    """Registers providers in an open context and runs prompts through them."""

    mock = staticmethod(mock_config)
    dsh = staticmethod(dsh_config)

    def register(self, config: AcpProviderConfig) -> str:
        """Register (once) a provider for ``config``; returns its name."""
        if self.runtime.get_provider(config.name) is None:
            self.runtime.register_provider(AcpProvider(config))
        return config.name

    async def start(
        self, config: AcpProviderConfig, prompt: str = "hello", signal: AbortSignal | None = None
    ) -> SubagentRun:
        """Start a run (the caller disposes it)."""
        return await self.start_on(self.register(config), prompt, signal)

    async def run(self, config: AcpProviderConfig, prompt: str = "hello") -> SubagentResult:
        """Start, await the result, dispose."""
        return await self.run_on(self.register(config), prompt)


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[AcpRig]:
    """A context (cwd = tmp_path) with a parent agent on the scripted model."""
    async with AcpRig.scripted(tmp_path) as made:
        yield made


@pytest.fixture
async def unsandboxed_rig(tmp_path: Path) -> AsyncIterator[AcpRig]:
    """:func:`rig` with ``[sandbox] mode = "off"``: for the teardown ladder of a bare
    process (in a sandbox, SIGTERM to bubblewrap ends the whole sandbox at once)."""
    async with AcpRig.scripted(tmp_path, sandbox=False) as made:
        yield made


@pytest.fixture
def keyed_child_preset(tmp_path: Path) -> Path:
    """A ``dsh acp`` child preset: "hang" hangs, "fail" fails, else ``Done: <prompt>``."""
    return keyed_preset_file(tmp_path / "child.toml")
