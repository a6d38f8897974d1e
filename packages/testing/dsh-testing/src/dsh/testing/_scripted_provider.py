"""The code behind :mod:`dsh.testing.scripted_provider` (its docstring says what it is)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any

import anyio
from pydantic import BaseModel, ConfigDict

from dsh.core import Context, EffectScope, Plugin
from dsh.subagent import (
    NO_START_CAPABILITIES,
    RunHandle,
    StartAborted,
    SubagentCapabilities,
    SubagentError,
    SubagentResult,
    SubagentRun,
    SubagentRuntime,
    SubagentStartRequest,
    SubagentUsage,
)
from dsh.subagent.kit import RemoteBudget

__all__ = ["FAIL_PROMPT", "HANG_PROMPT", "ScriptedProvider", "ScriptedProviderConfig", "plugin"]

HANG_PROMPT = "hang"
"""A prompt the scripted provider holds open until cancelled."""
FAIL_PROMPT = "fail"
"""A prompt the scripted provider answers with an ``error`` result."""

_ids = itertools.count(1)


class ScriptedProvider:
    """A provider whose child is a script. See the module docstring."""

    def __init__(
        self,
        name: str = "scripted",
        *,
        reply: str = "scripted reply",
        stop_reason: str = "completed",
        structured: Any = None,
        diagnostic: str | None = None,
        usage: Mapping[str, Any] | None = None,
        capabilities: SubagentCapabilities = NO_START_CAPABILITIES,
        inherits_parent_context: bool = False,
        gate: anyio.Event | None = None,
        respond: Callable[[SubagentStartRequest], SubagentResult] | None = None,
        start_error: SubagentError | None = None,
        result_error: BaseException | None = None,
        dispose_error: BaseException | None = None,
    ) -> None:
        self.name = name
        self.capabilities = capabilities
        self.inherits_parent_context = inherits_parent_context
        self.reply = reply
        self.stop_reason = stop_reason
        self.structured = structured
        self.diagnostic = diagnostic
        self.usage = usage
        self.gate = gate
        self.respond = respond
        self.start_error = start_error
        self.result_error = result_error
        self.dispose_error = dispose_error
        self.starts: list[SubagentStartRequest] = []
        """Every request ``start`` accepted, in order."""
        self.disposals = 0
        """How many runs were torn down."""
        self.live = 0
        """Runs started and not yet torn down."""

    def _result_for(self, request: SubagentStartRequest) -> SubagentResult:
        if self.respond is not None:
            return self.respond(request)
        if request.prompt_text == FAIL_PROMPT:
            return SubagentResult.failed("scripted child failed", output="partial work")
        return SubagentResult(
            self.reply,
            self.stop_reason,
            structured=self.structured,
            diagnostic=self.diagnostic,
            usage=SubagentUsage.from_json(self.usage),
        )

    async def start(self, request: SubagentStartRequest) -> SubagentRun:
        """Publish a run that settles from the script."""
        if self.start_error is not None:
            raise self.start_error
        if request.signal.aborted:
            raise StartAborted(f"subagent start aborted: {request.signal.reason}")
        self.starts.append(request)
        self.live += 1
        hold = request.prompt_text == HANG_PROMPT or self.gate is not None
        scope = anyio.CancelScope()
        finished = anyio.Event()
        run_id = f"{self.name}-{next(_ids)}"
        budget: RemoteBudget | None = None
        if request.budget is not None:  # (the budget capability: enforced, never ignored)
            meters = SubagentRuntime.of(request.parent.ctx).meters
            budget = RemoteBudget(meters, request.parent.id, request.budget, scope.cancel)

        def outcome(result: SubagentResult) -> SubagentResult:
            return budget.settle(result) if budget is not None else result

        def settle() -> None:
            if self.result_error is not None:
                handle.fail(self.result_error)
            else:
                handle.settle(outcome(self._result_for(request)))

        async def hold_open() -> None:
            try:
                with scope:
                    if request.prompt_text == HANG_PROMPT:
                        await anyio.sleep_forever()
                    assert self.gate is not None
                    await self.gate.wait()
                    settle()
            finally:
                if not handle.settled:
                    handle.settle(
                        outcome(SubagentResult.aborted(request.signal.reason or "disposed"))
                    )
                finished.set()

        async def dispose() -> None:
            scope.cancel()
            if hold:
                await finished.wait()
            release()

        def dispose_now() -> bool:
            # A run that settled at start has nothing to wait for: tear down in place.
            if hold:
                return False
            release()
            return True

        def release() -> None:
            unlink()
            self.disposals += 1
            self.live -= 1
            if self.dispose_error is not None:
                raise self.dispose_error

        handle = RunHandle(
            run_id,
            provider=self.name,
            dispose=dispose,
            dispose_now=dispose_now,
            label=request.label,
        )
        unlink = request.signal.on_abort(lambda reason: scope.cancel())
        if hold:
            request.parent.ctx.spawn(hold_open)
        else:
            settle()
        return handle.run


class ScriptedProviderConfig(BaseModel):
    """Config of the ``dsh-testing-scripted-provider`` plugin."""

    model_config = ConfigDict(extra="forbid")

    name: str = "scripted"
    reply: str = "scripted reply"
    stop_reason: str = "completed"
    diagnostic: str | None = None
    capabilities: dict[str, bool] = {}
    inherits_parent_context: bool = False


def apply(ctx: Context, config: ScriptedProviderConfig, effects: EffectScope) -> None:
    """Register a scripted provider."""
    provider = ScriptedProvider(
        config.name,
        reply=config.reply,
        stop_reason=config.stop_reason,
        diagnostic=config.diagnostic,
        capabilities=SubagentCapabilities(**config.capabilities),
        inherits_parent_context=config.inherits_parent_context,
    )
    effects.add(SubagentRuntime.of(ctx).register_provider(provider))


plugin = Plugin("dsh-testing-scripted-provider", apply, ScriptedProviderConfig)
