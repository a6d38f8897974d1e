"""The ``claude-code`` provider: one Claude Code CLI run per delegation."""

from __future__ import annotations

import importlib
import itertools
from types import ModuleType

import anyio

from dsh.subagent import (
    NO_START_CAPABILITIES,
    SubagentCapabilities,
    SubagentError,
    SubagentRun,
    SubagentStartRequest,
)
from dsh.subagent.out_of_process import resolve_child_cwd
from dsh.subagent_claude_code.command import resolve_cli
from dsh.subagent_claude_code.config import ClaudeCodeConfig

__all__ = ["ClaudeCodeProvider"]

_ids = itertools.count(1)
_driver: ModuleType | None = None


async def _load_driver() -> ModuleType:
    """The driver module; the first call imports claude-agent-sdk (seconds) in a thread."""
    global _driver
    if _driver is None:
        _driver = await anyio.to_thread.run_sync(
            importlib.import_module, "dsh.subagent_claude_code.driver"
        )
    return _driver


class ClaudeCodeProvider:
    """Runs each child as a Claude Code CLI process through claude-agent-sdk.

    The child starts fresh (it does not see the parent's history) in the
    parent's cwd, with the permission policy of its config; it honours none of
    the optional start fields (:data:`~dsh.subagent.NO_START_CAPABILITIES`).
    """

    inherits_parent_context = False

    def __init__(self, config: ClaudeCodeConfig | None = None) -> None:
        self.config = config or ClaudeCodeConfig()
        self.name = self.config.name
        self.capabilities: SubagentCapabilities = NO_START_CAPABILITIES

    async def start(self, request: SubagentStartRequest) -> SubagentRun:
        """Start the CLI for ``request`` and publish the run.

        Raises ``SubagentError``: ``UNSUPPORTED_CAPABILITY`` for an optional field
        (checked again here for direct callers), ``INVALID_REQUEST`` for a prompt
        without text or a bad cwd, ``START_FAILED`` when the CLI cannot run,
        ``ABORTED`` when the signal fires first. Nothing is left running then.
        """
        missing = self.capabilities.missing_for(request)
        if missing is not None:
            raise SubagentError(
                f'subagent provider "{self.name}" does not support the "{missing}" capability',
                "UNSUPPORTED_CAPABILITY",
            )
        self._check_aborted(request)
        if not request.prompt_text.strip():
            raise SubagentError(
                f"{self.name} provider: the prompt has no text to send to Claude Code",
                "INVALID_REQUEST",
            )
        cwd = resolve_child_cwd(self.config.cwd, request.parent, provider=self.name)
        cli = resolve_cli(self.config)
        driver = await _load_driver()
        self._check_aborted(request)
        run: SubagentRun = await driver.launch(
            self.config, request, cli=cli, cwd=cwd, run_id=f"{self.name}-{next(_ids)}"
        )
        return run

    @staticmethod
    def _check_aborted(request: SubagentStartRequest) -> None:
        if request.signal.aborted:
            raise SubagentError(f"subagent start aborted: {request.signal.reason}", "ABORTED")
