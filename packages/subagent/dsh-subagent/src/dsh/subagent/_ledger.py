"""The usage ledger: what every settled run cost, for ``ctx.subagents.usage(agent)``."""

from __future__ import annotations

from dsh.subagent._progress import SubagentUsage, UsageReport

__all__ = ["LEDGER_LIMIT", "UsageLedger"]

LEDGER_LIMIT = 100_000
"""Settled runs the usage ledger keeps (the oldest go first)."""

_UsageRow = tuple[int, int, int | None, int | None, float | None, bool] | None
"""A :class:`SubagentUsage` as plain values (None: unknown)."""

_UNKNOWN_USAGE = SubagentUsage.unknown()


class UsageLedger:
    """Settled runs: the agents above each run (parent first) and its usage.

    An entry is a tuple of plain values (so the collector stops tracking it: a
    long-lived process keeps up to :data:`LEDGER_LIMIT` of them); the usage objects
    of a report are rebuilt only when someone asks for one.
    """

    __slots__ = ("_rows",)

    def __init__(self) -> None:
        self._rows: dict[str, tuple[tuple[str, ...], _UsageRow]] = {}

    def record(self, run_id: str, above: tuple[str, ...], usage: SubagentUsage | None) -> None:
        """Keep what run ``run_id`` (below the agents ``above``) used (None: unknown)."""
        rows = self._rows
        if usage is None or usage is _UNKNOWN_USAGE:
            rows[run_id] = (above, None)
        else:  # (_row_of inlined: once per settled run)
            rows[run_id] = (
                above,
                (
                    usage.input_tokens,
                    usage.output_tokens,
                    usage.cached_input_tokens,
                    usage.reasoning_tokens,
                    usage.cost_usd,
                    usage.incomplete,
                ),
            )
        if len(rows) > LEDGER_LIMIT:
            del rows[next(iter(rows))]  # bounded: the oldest run goes

    def report(self, agent_id: str) -> UsageReport:
        """Every settled run below agent ``agent_id``, and the total."""
        rows = self._rows.items()
        runs = {run_id: _usage_of(row) for run_id, (above, row) in rows if agent_id in above}
        total = SubagentUsage()
        for usage in runs.values():
            total = total + usage
        return UsageReport(total, runs)


def _usage_of(row: _UsageRow) -> SubagentUsage:
    return _UNKNOWN_USAGE if row is None else SubagentUsage(*row)
