"""The parent-side budget of a run in another process.

A :class:`~dsh.subagent.kit.RemoteRun` whose request carries a budget opens one
:class:`RemoteBudget`: a :class:`~dsh.subagent.BudgetMeter` below the parent agent's
meter (if any), with the run's stop as its ``stop``. The transport reports the
child's running usage as it comes (:meth:`RemoteRun.report_usage`: cumulative
figures; the kit charges the difference); a reached cap stops the run the way a
cancel does, and the run settles with stop reason ``budget`` and the cap's
diagnostic. The time cap is a timer here, whatever the child reports. At settlement
the run's final usage is charged too, so what the child spent counts against every
budget above it (the parent agent's next checkpoint sees it).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from dsh.subagent._errors import UnsupportedCapability
from dsh.subagent._progress import SubagentUsage
from dsh.subagent._types import BUDGET_CAPS, Budget, SubagentResult

if TYPE_CHECKING:
    from dsh.subagent._meter import BudgetMeter, BudgetMeters, Stop

__all__ = ["ALL_CAPS", "RemoteBudget", "check_caps"]

ALL_CAPS = frozenset(BUDGET_CAPS)
"""Every cap: what a child that enforces the budget on its own side (``dsh acp``) covers."""


def check_caps(provider: str, budget: Budget, enforced: frozenset[str]) -> None:
    """Raise ``UNSUPPORTED_CAPABILITY`` naming the first cap of ``budget`` that is
    not in ``enforced`` (what the provider can enforce)."""
    for name in BUDGET_CAPS:
        if getattr(budget, name) is not None and name not in enforced:
            raise UnsupportedCapability(
                f'subagent provider "{provider}" cannot enforce a {name} budget (it enforces'
                f" {', '.join(cap for cap in BUDGET_CAPS if cap in enforced)}: from the usage"
                f" its child reports as it goes); delegate without a {name} cap, or to an"
                " in-process provider"
            )


class RemoteBudget:
    """What one remote run spent, as its child reported it, against its budget."""

    __slots__ = ("_meters", "_tokens", "_turns", "_usd", "meter")

    def __init__(self, meters: BudgetMeters, parent_id: str, budget: Budget, stop: Stop) -> None:
        self._meters = meters
        self.meter: BudgetMeter = meters.open_remote(parent_id, budget, stop)
        self._tokens = 0
        self._usd = 0.0
        self._turns = 0

    def report(self, usage: SubagentUsage, turns: int | None = None) -> None:
        """The child's cumulative usage so far (and model calls, when known): the
        increase is charged; a reached cap stops the run."""
        tokens = usage.input_tokens + usage.output_tokens
        usd = usage.cost_usd or 0.0
        calls = turns if turns is not None else self._turns
        more_tokens, more_usd, more_turns = (
            max(tokens - self._tokens, 0),
            max(usd - self._usd, 0.0),
            max(calls - self._turns, 0),
        )
        self._tokens = max(tokens, self._tokens)
        self._usd = max(usd, self._usd)
        self._turns = max(calls, self._turns)
        if more_tokens or more_usd or more_turns:
            self.meter.charge(more_tokens, more_usd, more_turns)
        else:
            self.meter.check()

    def settle(self, result: SubagentResult) -> SubagentResult:
        """The run's result under its budget: a stop the meter caused (an ``aborted``
        result) becomes ``budget`` with the cap's diagnostic; the final usage is
        charged; the meter is closed."""
        verdict = self.meter.verdict()
        self.meter.release()  # (no stop any more: the run has settled)
        if result.usage != SubagentUsage.unknown():
            self.report(result.usage)
        self._meters.close_remote(self.meter)
        if verdict is not None and result.stop_reason == "aborted":
            stop, diagnostic = verdict
            return replace(result, stop_reason=stop, diagnostic=diagnostic)
        return result
