"""A budgeted in-process child: its meter, and the start-time check of a ``usd`` cap."""

from __future__ import annotations

from dsh.core import Agent
from dsh.subagent import Budget, BudgetMeter, InvalidRequest, SubagentRuntime
from dsh.subagent.kit import BudgetMeters

__all__ = ["open_meter"]

REPORTS_COST = "reports_cost"
"""Adapter attribute: False when the adapter never prices its calls (a ``usd`` cap is
then refused at start)."""


async def open_meter(child: Agent, budget: Budget) -> tuple[BudgetMeter, BudgetMeters]:
    """The meter of ``child``'s run under ``budget`` (below its parent's meter, if any),
    and the registry it is in. A ``usd`` cap on a model whose adapter says it never
    prices its calls is refused (``INVALID_REQUEST``); the child is closed first."""
    adapter = child.model.adapter
    if budget.usd is not None and getattr(adapter, REPORTS_COST, None) is False:
        await child.aclose("start failed")
        raise InvalidRequest(
            f"a usd budget (${budget.usd:.2f}) cannot be enforced: the child's model adapter"
            f" ({type(adapter).__name__}) reports no cost; remove usd from the budget or give"
            " the child a priced model"
        )
    meters = SubagentRuntime.of(child.ctx).meters
    return meters.open(child, budget, child.cancel), meters
