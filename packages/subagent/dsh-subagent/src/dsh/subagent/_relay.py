"""The delegations under an agent, as one stream: what a server relays to its client.

A server that serves an agent to another process (``dsh acp``, ``dsh a2a``) reports
the delegations that agent starts, and theirs, so the client's ``progress()`` shows
its grandchildren. :class:`DelegationRelay` listens to the context's bus once and,
for every agent being watched, hands a sink each nested run's items with their path
relative to that agent (``(g,)`` for a run ``g`` the agent started, ``(g, h)`` below
it): ``child_start``, the run's own items, ``child_end``. It also adds up the usage
of the runs that ended, for a tree-wide figure::

    relay = DelegationRelay(ctx)
    watch = relay.watch(agent, send_to_client)   # per served session / task
    ...
    total = own_usage + watch.usage              # runs settled while watched
    watch.close()
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from dsh.subagent._progress import SubagentProgress, SubagentUsage

if TYPE_CHECKING:
    from dsh.core import Agent, BusEvent, Context
    from dsh.core.lifecycle import Disposer
    from dsh.core.sessions import Event

__all__ = ["DelegationRelay", "RelayWatch", "turn_usage"]


class RelayWatch:
    """One watched agent: its sink, and the usage of the runs under it that ended."""

    __slots__ = ("_relay", "agent_id", "runs", "sink", "usage")

    def __init__(
        self, relay: DelegationRelay, agent_id: str, sink: Callable[[SubagentProgress], None]
    ) -> None:
        self._relay = relay
        self.agent_id = agent_id
        self.sink = sink
        self.usage = SubagentUsage()
        """Usage of the nested runs that ended while watched (complete when none did)."""
        self.runs = 0
        """How many nested runs ended while watched."""

    def reset_usage(self) -> None:
        """Start counting afresh (a new turn)."""
        self.usage = SubagentUsage()
        self.runs = 0

    def close(self) -> None:
        """Stop relaying."""
        self._relay._forget(self)


class DelegationRelay:
    """Relays nested delegations of watched agents (see the module docstring)."""

    def __init__(self, ctx: Context) -> None:
        bus = ctx.events
        self._watches: dict[str, RelayWatch] = {}
        self._paths: dict[str, tuple[RelayWatch, tuple[str, ...]]] = {}
        self._offs: list[Disposer] = [
            bus.on("subagent/start", self._on_start),
            bus.on("subagent/progress", self._on_progress),
            bus.on("subagent/end", self._on_end),
        ]

    def watch(self, agent: Agent, sink: Callable[[SubagentProgress], None]) -> RelayWatch:
        """Relay the delegations under ``agent`` to ``sink`` until the watch closes."""
        watch = RelayWatch(self, agent.id, sink)
        self._watches[agent.id] = watch
        return watch

    def close(self) -> None:
        """Stop listening."""
        for off in self._offs:
            off()
        self._offs = []
        self._watches.clear()
        self._paths.clear()

    def _forget(self, watch: RelayWatch) -> None:
        if self._watches.get(watch.agent_id) is watch:
            del self._watches[watch.agent_id]
        for run_id in [r for r, (w, _) in self._paths.items() if w is watch]:
            del self._paths[run_id]

    def _place(self, parent_agent: str, run_id: str) -> tuple[RelayWatch, tuple[str, ...]] | None:
        watch = self._watches.get(parent_agent)
        if watch is not None:
            return watch, (run_id,)
        above = self._paths.get(parent_agent)  # in-process runs: run id == child agent id
        if above is not None:
            return above[0], (*above[1], run_id)
        return None

    def _on_start(self, event: BusEvent) -> None:
        data = event.data
        run_id = str(data["run_id"])
        placed = self._place(event.scope or "", run_id)
        if placed is None:
            return
        self._paths[run_id] = placed
        watch, path = placed
        watch.sink(
            SubagentProgress(
                "child_start",
                path,
                run_id=run_id,
                provider=_text(data.get("provider")),
                label=_text(data.get("label")),
            )
        )

    def _on_progress(self, event: BusEvent) -> None:
        placed = self._paths.get(str(event.data["run_id"]))
        item = event.data.get("item")
        if placed is None or not isinstance(item, SubagentProgress):
            return
        watch, path = placed
        watch.sink(replace(item, path=(*path, *item.path)))

    def _on_end(self, event: BusEvent) -> None:
        data = event.data
        run_id = str(data["run_id"])
        placed = self._paths.pop(run_id, None)
        if placed is None:
            return
        watch, path = placed
        usage = data.get("usage")
        if isinstance(usage, SubagentUsage):
            watch.usage = watch.usage + usage
            watch.runs += 1
        watch.sink(
            SubagentProgress(
                "child_end",
                path,
                run_id=run_id,
                provider=_text(data.get("provider")),
                label=_text(data.get("label")),
                stop_reason=str(data.get("stop_reason")),
            )
        )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def turn_usage(events: Sequence[Event], start: int = 0, end: int | None = None) -> SubagentUsage:
    """The usage an agent's own model calls report in ``events[start:end]``
    (unknown when none reports any)."""
    input_tokens = output_tokens = 0
    seen = False
    stop = len(events) if end is None else min(end, len(events))
    for index in range(max(start, 0), stop):
        event = events[index]
        if event.type == "assistant/message":
            usage = event.data.get("usage")
            if usage:
                seen = True
                input_tokens += int(usage.get("input_tokens", 0))
                output_tokens += int(usage.get("output_tokens", 0))
    return SubagentUsage(input_tokens, output_tokens) if seen else SubagentUsage.unknown()
