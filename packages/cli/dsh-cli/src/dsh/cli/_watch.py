"""Connect a view to a run: the lead's events and the context's ``subagent/*`` events,
and what the run cost at the end."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from dsh.core import Agent, Context, TurnOutcome, last_output
from dsh.core.permissions import PERMISSION_REFUSED
from dsh.subagent import SubagentRuntime, SubagentUsage

if TYPE_CHECKING:
    from dsh.cli._view import RunSummary, RunView

__all__ = ["choose_view", "lead_usage", "summarize", "watch"]

_EVENTS = ("subagent/start", "subagent/progress", "subagent/end", PERMISSION_REFUSED)


def watch(ctx: Context, lead: Agent, view: RunView) -> Callable[[], None]:
    """Feed ``view`` the lead's events (streamed text included), every delegation's
    start, progress and end, and every refused tool call of this context. Subscribe
    before the first turn: the runtime routes progress to the bus only for runs
    started while someone listens. Returns the
    disposer."""
    view.begin(lead.id)
    offs = [ctx.events.on(kind, view.on_bus) for kind in _EVENTS]
    offs.append(lead.observe(view.on_lead_event, deltas=True))

    def stop() -> None:
        for off in offs:
            off()

    return stop


def lead_usage(lead: Agent) -> SubagentUsage:
    """The lead's own model usage (every ``assistant/message`` of its session);
    incomplete if a model call reported none."""
    total = SubagentUsage()
    seen = False
    missing = False
    for usage in _lead_calls(lead):
        if usage is not None:
            seen = True
            total = total + usage
        else:
            missing = True
    if not seen:
        return SubagentUsage.unknown()
    if missing:
        total = total + SubagentUsage(incomplete=True)
    return total


def _lead_calls(lead: Agent) -> Iterator[SubagentUsage | None]:
    for event in lead.session.events:
        if event.type == "assistant/message":
            usage = event.data.get("usage")
            yield SubagentUsage.from_json(usage) if usage else None


def _unpriced(usage: SubagentUsage | None) -> bool:
    """Tokens used, and no price for them."""
    return usage is not None and usage.total_tokens > 0 and usage.cost_usd is None


def summarize(ctx: Context, lead: Agent, outcome: TurnOutcome | None) -> RunSummary:
    """The answer (the lead's last non-empty message), how it ended, and the usage: the
    lead's own plus ``ctx.subagents.usage(lead)``."""
    from dsh.cli._view import RunSummary

    stop: str = outcome.stop_reason if outcome is not None else "aborted"
    error = outcome.error if outcome is not None else None
    runtime = SubagentRuntime.of(ctx)
    meter = runtime.budget_meter(lead)
    if meter is not None and meter.tripped is not None and stop != "completed":
        stop, error = meter.tripped  # stopped at the run's budget (``budget``)
    report = runtime.usage(lead)
    unpriced = any(_unpriced(usage) for usage in _lead_calls(lead)) or any(
        _unpriced(usage) for usage in report.runs.values()
    )
    return RunSummary(
        last_output(lead.session.events), stop, error, lead_usage(lead), report, unpriced
    )


def choose_view(*, json_lines: bool, demo: bool = False) -> RunView:
    """``--json``: JSON lines; stdout a terminal: the live tree; else plain lines."""
    from dsh.cli._json_view import JsonView
    from dsh.cli._live_view import LiveView
    from dsh.cli._plain_view import PlainView

    if json_lines:
        return JsonView()
    if sys.stdout.isatty():
        return LiveView()
    if demo:
        return PlainView(err=sys.stdout, tree_at_end=True, answer=False, show_lead=True)
    return PlainView()
