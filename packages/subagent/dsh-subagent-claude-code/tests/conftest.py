"""Fixtures: the real bundled Claude Code CLI, offline, against the fake Messages API;
or (``cc_tape``) with its model calls answered from a committed tape
(``tests/tapes/<name>/``): see test_claude_code_taped.py."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dsh.core import AbortSignal, Agent, Context, parse_preset
from dsh.subagent import SubagentProgress, SubagentResult, SubagentRuntime, SubagentStartRequest
from dsh.subagent_claude_code import ClaudeCodeConfig, ClaudeCodeProvider
from dsh.subagent_claude_code._command import bundled_cli
from dsh.testing.fixtures import progress_and_result
from dsh.testing.model_servers import AnthropicMessagesServer, claude_code_env
from dsh.testing.pytest_plugin import TapeFactory

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
    server: AnthropicMessagesServer | None
    """The fake server (None when a tape replays)."""
    provider: ClaudeCodeProvider
    workdir: Path

    @property
    def runtime(self) -> SubagentRuntime:
        return SubagentRuntime.of(self.ctx)

    async def delegate_watching(self, prompt: str) -> tuple[SubagentResult, list[SubagentProgress]]:
        """Delegate ``prompt`` and read ``run.progress()`` until it ends (at settlement)."""
        run = await self.runtime.start(
            self.provider.name, SubagentStartRequest(prompt, self.parent, AbortSignal())
        )
        items, result = await progress_and_result(run)
        return result, items


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


UNREACHABLE_API = "http://127.0.0.1:9"
"""The CLI's model address when a tape replays: nothing listens there (the tape answers)."""


class ClaudeCodeTapes:
    """``async with cc_tape(name, rules, **config_fields) as setup``: a :class:`Setup`
    whose CLI's model calls go through the test's tape ``tests/tapes/<name>/`` (the
    ``tape`` fixture of dsh-testing). By default the tape replays: no server runs, the
    CLI's ``ANTHROPIC_BASE_URL`` is :data:`UNREACHABLE_API`, and the provider routes it
    through ``DSH_TAPE_PROXY`` to the replaying proxy. Under ``pytest --record-tapes``
    the tape is written anew: against the real Messages API when ``ANTHROPIC_API_KEY``
    is set (at ``ANTHROPIC_BASE_URL``, else Anthropic's), else against a fake Messages
    server with ``rules``."""

    def __init__(self, tape: TapeFactory, cli: str, workdir: Path, root: Path) -> None:
        self.tape = tape
        self._cli, self._workdir, self._root = cli, workdir, root

    @contextlib.asynccontextmanager
    async def __call__(
        self,
        name: str,
        rules: Callable[[AnthropicMessagesServer], None],
        **config_fields: Any,
    ) -> AsyncIterator[Setup]:
        if not self.tape.recording:
            self.tape(name)
            async with self.offline(**config_fields) as setup:
                yield setup
            return
        key = os.environ.get("ANTHROPIC_API_KEY")
        if key:  # a real model answers: the fake's rules do not apply
            real = os.environ.get("ANTHROPIC_BASE_URL") or "https://api.anthropic.com"
            self.tape(name, **{"claude-code": real})
            env = {"ANTHROPIC_BASE_URL": real, "ANTHROPIC_API_KEY": key}
            config_fields["env"] = {**config_fields.get("env", {}), **env}
            async with self.offline(**config_fields) as setup:
                yield setup
            return
        with AnthropicMessagesServer() as server:
            rules(server)
            self.tape(name, **{"claude-code": server.api_base})
            async with self.offline(server, **config_fields) as setup:
                yield setup

    @contextlib.asynccontextmanager
    async def offline(
        self, server: AnthropicMessagesServer | None = None, **config_fields: Any
    ) -> AsyncIterator[Setup]:
        """A setup whose CLI is pointed at ``server`` (by default at
        :data:`UNREACHABLE_API`): its model calls go where ``DSH_TAPE_PROXY`` says."""
        api_base = server.api_base if server is not None else UNREACHABLE_API
        offline = claude_code_env(api_base, self._root / "cc")
        async with Context.open(parse_preset(SCRIPTED_PARENT), cwd=self._workdir) as ctx:
            provider = ClaudeCodeProvider(make_config(offline, **config_fields))
            SubagentRuntime.of(ctx).register_provider(provider)
            yield Setup(ctx, ctx.agents.create(), server, provider, self._workdir)


@pytest.fixture
def cc_tape(cli: str, workdir: Path, tmp_path: Path, tape: TapeFactory) -> ClaudeCodeTapes:
    """Real Claude Code runs whose model calls are on a tape (:class:`ClaudeCodeTapes`)."""
    return ClaudeCodeTapes(tape, cli, workdir, tmp_path)
