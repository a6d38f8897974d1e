"""A parent agent in an open context that starts runs on registered providers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Self

from dsh.core import AbortSignal, Agent, Context, parse_preset
from dsh.subagent import SubagentResult, SubagentRun, SubagentRuntime, SubagentStartRequest

from ._presets import SCRIPTED_PRESET

__all__ = ["ProviderRig", "scripted_context"]


@asynccontextmanager
async def scripted_context(
    cwd: Path | None = None, *, sandbox: bool = True, plugins: str = ""
) -> AsyncIterator[Context]:
    """An open context on the scripted model in ``cwd``, with ``plugins``
    (:func:`~dsh.testing.fixtures.plugin_rows`); ``sandbox=False``: ``[sandbox] mode =
    "off"``."""
    preset = SCRIPTED_PRESET if sandbox else f'{SCRIPTED_PRESET}[sandbox]\nmode = "off"\n'
    async with Context.open(parse_preset(preset + plugins), cwd=cwd) as ctx:
        yield ctx


class ProviderRig:
    """Starts runs on providers of an open context for one parent agent."""

    def __init__(self, ctx: Context, parent: Agent) -> None:
        self.ctx = ctx
        self.parent = parent
        self.runtime = SubagentRuntime.of(ctx)

    @classmethod
    @asynccontextmanager
    async def scripted(
        cls, cwd: Path | None = None, *, sandbox: bool = True, plugins: str = ""
    ) -> AsyncIterator[Self]:
        """A rig for a new parent agent in :func:`scripted_context` (``cwd``, ``sandbox``,
        ``plugins`` as there), open while the block runs."""
        async with scripted_context(cwd, sandbox=sandbox, plugins=plugins) as ctx:
            yield cls(ctx, ctx.agents.create())

    async def start_on(
        self, provider: str, prompt: str, signal: AbortSignal | None = None, **fields: Any
    ) -> SubagentRun:
        """Start a run of ``prompt`` on ``provider`` (the caller disposes it); ``fields``
        go to :class:`~dsh.subagent.SubagentStartRequest`."""
        request = SubagentStartRequest(prompt, self.parent, signal or AbortSignal(), **fields)
        return await self.runtime.start(provider, request)

    async def run_on(self, provider: str, prompt: str, **fields: Any) -> SubagentResult:
        """Start, await the result, dispose."""
        run = await self.start_on(provider, prompt, **fields)
        async with run:
            return await run.result
