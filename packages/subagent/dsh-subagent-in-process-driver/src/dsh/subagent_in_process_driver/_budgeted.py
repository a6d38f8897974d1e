"""A budgeted in-process child: its meter, and the start-time check of a ``usd`` cap."""

from __future__ import annotations

from dsh.core import Agent
from dsh.subagent import Budget

__all__ = ["usd_refusal"]

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
