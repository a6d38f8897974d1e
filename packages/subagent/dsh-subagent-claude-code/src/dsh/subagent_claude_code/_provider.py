"""The ``claude-code`` provider: one Claude Code CLI run per delegation."""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

import anyio

from dsh.subagent import (
    InvalidRequest,
    SubagentCapabilities,
    SubagentRun,
    SubagentStartRequest,
    UnsupportedCapability,
)
from dsh.subagent.kit import process_max_running
from dsh.subagent_claude_code._command import resolve_cli
from dsh.subagent_claude_code._config import ClaudeCodeConfig

__all__ = ["ClaudeCodeProvider"]

_BUDGET_ONLY = SubagentCapabilities(budget=True)
"""A budget is enforced from this side (the run's ``budget_caps``); nothing else."""

_RUN_MODULE = "dsh.subagent_claude_code._run"


async def _run_module() -> ModuleType:
    """The run module; the first call imports claude-agent-sdk (seconds) in a thread."""
    module = sys.modules.get(_RUN_MODULE)
    if module is None:
        module = await anyio.to_thread.run_sync(importlib.import_module, _RUN_MODULE)
    return module


class ClaudeCodeProvider:
    """Runs each child as a Claude Code CLI process through claude-agent-sdk.

    The child starts fresh (it does not see the parent's history) in the
    parent's cwd, with the permission policy of its config; it honours none of
    the optional start fields but ``budget`` (tokens, time and model calls, enforced
    from this side from the usage the CLI reports as it goes).
    """

    inherits_parent_context = False

    def __init__(self, config: ClaudeCodeConfig | None = None) -> None:
        self.config = config or ClaudeCodeConfig()
        self.name = self.config.name
        self.capabilities: SubagentCapabilities = _BUDGET_ONLY
        self.max_running: int | None = process_max_running()
        """Default cap on running children: the cores (a preset's caps override it)."""

    async def start(self, request: SubagentStartRequest) -> SubagentRun:
        """Start the CLI for ``request`` and publish the run (the kit's ``launch``:
        ``StartAborted``, ``StartFailed``, nothing left running when it raises).

        An optional start field raises ``UnsupportedCapability`` (checked here too,
        for direct callers), a prompt without text ``InvalidRequest``.
        """
        missing = self.capabilities.missing_for(request)
        if missing is not None:
            raise UnsupportedCapability(
                f'subagent provider "{self.name}" does not support the "{missing}" capability'
            )
        if not request.prompt_text.strip():
            raise InvalidRequest(
                f"{self.name} provider: the prompt has no text to send to Claude Code"
            )
        cli = resolve_cli(self.config)
        run = (await _run_module()).ClaudeCodeRun(request, self.config, cli)
        launched: SubagentRun = await run.launch()
        return launched
