"""Fixtures: the real bundled Claude Code CLI, offline, against the fake Messages API."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dsh.core import Agent, Context, parse_preset
from dsh.subagent import SubagentRuntime
from dsh.subagent_claude_code import ClaudeCodeConfig, ClaudeCodeProvider
from dsh.subagent_claude_code._command import bundled_cli
from dsh.testing.model_servers import AnthropicMessagesServer, claude_code_env

SCRIPTED_PARENT = '[agent.model]\nadapter = "scripted"\n'


@pytest.fixture(scope="session")
def cli() -> str:
    """The CLI bundled in claude-agent-sdk; missing is a failure under CI=true."""
    path = bundled_cli()
    if path is None:
        message = (
            "the Claude Code CLI bundled in claude-agent-sdk is missing: run `uv sync` (the"
            " claude-agent-sdk wheel for linux x86-64 / arm64 and macOS bundles it)"
        )
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture
def server() -> Iterator[AnthropicMessagesServer]:
    """A fake Messages API; tests add rules with ``server.when(...)``."""
    with AnthropicMessagesServer() as srv:
        yield srv


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """The parent session's cwd (where the child runs)."""
    path = tmp_path / "work"
    path.mkdir()
    return path


@dataclass
class Setup:
    """A context with the provider registered, a parent agent, and the fake server."""

    ctx: Context
    parent: Agent
    server: AnthropicMessagesServer
    provider: ClaudeCodeProvider
    workdir: Path

    @property
    def runtime(self) -> SubagentRuntime:
        return SubagentRuntime.of(self.ctx)


@pytest.fixture
def cc_env(server: AnthropicMessagesServer, tmp_path: Path) -> dict[str, str]:
    """The CLI's offline environment for this test's ``server``."""
    return claude_code_env(server.api_base, tmp_path / "cc")


def make_config(offline: dict[str, str], **fields: Any) -> ClaudeCodeConfig:
    """A provider config that runs the CLI offline (``offline``: the env for that)."""
    fields["env"] = {**offline, **fields.get("env", {})}
    fields.setdefault("model", "claude-sonnet-4-5")
    fields.setdefault("turn_timeout", 60)
    return ClaudeCodeConfig(**fields)


@pytest.fixture
def config_fields() -> dict[str, Any]:
    """Override in a test module (or parametrize) to change the provider config."""
    return {}


@pytest.fixture
async def setup(
    cli: str,
    server: AnthropicMessagesServer,
    workdir: Path,
    cc_env: dict[str, str],
    config_fields: dict[str, Any],
) -> AsyncIterator[Setup]:
    """Provider registered in an open context; the parent's cwd is ``workdir``."""
    async with Context.open(parse_preset(SCRIPTED_PARENT), cwd=workdir) as ctx:
        provider = ClaudeCodeProvider(make_config(cc_env, **config_fields))
        SubagentRuntime.of(ctx).register_provider(provider)
        yield Setup(ctx, ctx.agents.create(), server, provider, workdir)
