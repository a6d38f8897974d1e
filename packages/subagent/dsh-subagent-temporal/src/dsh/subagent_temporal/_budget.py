"""A delegation's budget on the worker: what one attempt of it may spend.

The parent sends the remainder of every budget above the delegation
(``DelegationSpec.budget``, the same remainder ``dsh acp`` gets in ``_meta.dsh.budget``).
The worker starts the child through its inner provider with that budget on the request,
so the child and its whole tree run under it exactly as they would in-process (the
inner provider's meter; ``spawn`` and ``fork`` enforce every cap).

A retried attempt (its worker was lost, drained, or cut off from the server) runs under
that budget **less what the attempts before it spent**: every heartbeat carries what the
delegation spent so far, every attempt counted (:func:`heartbeat_spend`), Temporal
hands the last heartbeat's details to the next attempt (:class:`Earlier`), and the time
since the delegation was first scheduled counts against ``seconds``. A cap they used up
ends the attempt at once with stop reason ``budget`` (:func:`attempt_budget`), without
starting the child. What an attempt spent after its last heartbeat reached the server
(the model calls of up to one ``--heartbeat-every`` period, and the one in flight) is
not known to the next one. The full remainder again would be simpler, but a worker
lost near the cap would then let the delegation spend up to twice what its parent had
left.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dsh.subagent import Budget, BudgetMeter, SubagentUsage

__all__ = ["SPENT_CAPS", "Earlier", "attempt_budget", "heartbeat_spend"]

SPENT_CAPS = ("tokens", "usd", "turns", "children")
"""The caps a heartbeat's ``spent`` counts (``seconds`` is the clock's)."""


@dataclass(frozen=True)
class Earlier:
    """What the attempts before this one spent, as the last heartbeat said: their
    ``usage`` (None: none reported) and ``spent`` against the caps."""

    usage: SubagentUsage | None = None
    spent: dict[str, float] = field(default_factory=dict)

    @classmethod
    def of(cls, details: Sequence[Any]) -> Earlier:
        """Read the previous attempt's last heartbeat details (empty: a first attempt)."""
        last = details[-1] if details else None
        if not isinstance(last, Mapping):
            return cls()
        raw_usage = last.get("usage")
        usage = SubagentUsage.from_json(raw_usage) if isinstance(raw_usage, Mapping) else None
        raw_spent = last.get("spent")
        spent: dict[str, float] = {}
        if isinstance(raw_spent, Mapping):
            for name in SPENT_CAPS:
                value = raw_spent.get(name)
                if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
                    spent[name] = value
        return cls(usage if usage != SubagentUsage.unknown() else None, spent)

    def plus(self, usage: SubagentUsage | None) -> SubagentUsage | None:
        """``usage`` (this attempt's) with the earlier attempts' added."""
        if self.usage is None:
            return usage
        if usage is None or usage == SubagentUsage.unknown():
            return self.usage
        return self.usage + usage


def attempt_budget(budget: Budget, earlier: Earlier, elapsed: float) -> Budget | str:
    """The budget of an attempt: ``budget`` less what ``earlier`` attempts spent and
    ``elapsed`` seconds; or, when that used a cap up, the cap's diagnostic (the
    meter's words: ``token budget 500 reached: 520 tokens used``)."""
    if not earlier.spent and elapsed <= 0:
        return budget
    meter = BudgetMeter(budget, None, _ignore)
    try:
        meter.tokens = int(earlier.spent.get("tokens", 0))
        meter.usd = float(earlier.spent.get("usd", 0.0))
        meter.turns = int(earlier.spent.get("turns", 0))
        children = int(earlier.spent.get("children", 0))
        meter.children = min(children, budget.children) if budget.children is not None else 0
        meter.started -= max(elapsed, 0.0)
        reached = meter.reached()
        if reached is not None:
            return f"{reached} (by the delegation's earlier attempts)"
        return meter.remaining()
    finally:
        meter.release()


def heartbeat_spend(
    earlier: Earlier, meter: BudgetMeter | None, usage: SubagentUsage | None
) -> dict[str, float]:
    """What the delegation spent so far against the caps, every attempt counted: this
    attempt's from its child's meter (an in-process child: its whole tree), else from
    the child's usage (tokens and cost only), plus ``earlier``."""
    now: dict[str, float] = {}
    if meter is not None:
        figures = meter.spent()
        now = {name: figures[name] for name in SPENT_CAPS if figures.get(name)}
    elif usage is not None and usage != SubagentUsage.unknown():
        now["tokens"] = usage.input_tokens + usage.output_tokens
        if usage.cost_usd:
            now["usd"] = usage.cost_usd
    total = dict(earlier.spent)
    for name, value in now.items():
        total[name] = total.get(name, 0) + value
    return total


def _ignore(diagnostic: str) -> None:
    return None
