"""A budgeted in-process child: its meter, and the start-time check of a ``usd`` cap."""

from __future__ import annotations

from dsh.core import Agent
from dsh.subagent import Budget, BudgetMeter
from dsh.subagent.kit import BudgetMeters

__all__ = ["METERED", "open_meter", "usd_refusal"]

METERED = frozenset(("assistant/message", "tool/call", "tool/result", "turn/start"))
"""The child's events its meter is told of (a model call's usage; before the next call)."""
REPORTS_COST = "reports_cost"
"""Adapter attribute: False when the adapter never prices its calls (a ``usd`` cap is
then refused at start)."""


def usd_refusal(child: Agent, budget: Budget) -> str | None:
    """Why ``budget`` cannot run on ``child``'s model (a ``usd`` cap on an adapter that
    says it never prices its calls), or None."""
    adapter = child.model.adapter
    if budget.usd is None or getattr(adapter, REPORTS_COST, None) is not False:
        return None
    return (
        f"a usd budget (${budget.usd:.2f}) cannot be enforced: the child's model adapter"
        f" ({type(adapter).__name__}) reports no cost; remove usd from the budget or give"
        " the child a priced model"
    )


def open_meter(
    child: Agent, budget: Budget, meters: BudgetMeters
) -> tuple[BudgetMeter, BudgetMeters]:
    """The meter of ``child``'s run under ``budget`` (below its parent's meter, if any),
    and the registry it is in (the runtime's ``meters``)."""
    return meters.open(child, budget, child.cancel), meters
