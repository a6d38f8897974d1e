"""The delegation tree as data: what the views draw.

:class:`DelegationTree` folds the runtime's events (``subagent/start``,
``subagent/progress``, ``subagent/end``) into one node per run, nested runs
included: in-process grandchildren arrive as their own ``subagent/start`` whose
``parent_agent`` is the child's agent (whose id is its run id); runs nested inside
a remote child (a ``dsh acp`` child's own delegations) arrive as progress items of
that child with a non-empty ``path`` (``child_start`` / ``child_end``). Nothing
here knows about terminals, rich or the run itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from dsh.cli._safe_text import strip_controls
from dsh.subagent import SubagentProgress, SubagentUsage

__all__ = [
    "NOT_STARTED",
    "DelegationTree",
    "Node",
    "NodeState",
    "describe_call",
    "format_budget",
    "format_cost",
    "format_elapsed",
    "format_usage",
    "short_id",
]

NodeState = Literal["queued", "running", "done"]

_NOT_FAILED = ("completed", "aborted", "interrupted")

NOT_STARTED = "not started"
"""The stop reason of a delegation that could not start."""

_EXCERPT = 240


@dataclass(slots=True)
class Node:
    """One delegation (a run) in the tree."""

    run_id: str
    provider: str
    label: str | None
    depth: int
    started: float
    state: NodeState = "running"
    stop_reason: str | None = None
    diagnostic: str | None = None
    ended: float | None = None
    usage: SubagentUsage | None = None
    activity: str | None = None
    """What it is doing now: the tool it runs, or None."""
    text: str = ""
    """The tail of its latest assistant text (an excerpt of its answer once done)."""
    queue_position: int | None = None
    remote: bool = False
    """Known only through a remote child's progress (a run in another process)."""
    refused: list[str] = field(default_factory=list)
    """The tools whose calls the permission policy refused it, in order."""
    children: list[Node] = field(default_factory=list)
    budget: dict[str, Any] | None = None
    """The caps of its budget (``subagent/start``; None: none)."""
    spent: dict[str, Any] | None = None
    """What it spent against each cap (``subagent/end``; None: not known yet)."""

    def spending(self, now: float | None = None) -> dict[str, Any]:
        """What it spent against its caps: the end's figures, else its usage so far
        and its wall time."""
        if self.spent is not None:
            return self.spent
        spent: dict[str, Any] = {"seconds": self.elapsed(now)}
        if self.usage is not None:
            spent["tokens"] = self.usage.total_tokens
            if self.usage.cost_usd is not None:
                spent["usd"] = self.usage.cost_usd
        return spent

    @property
    def failed(self) -> bool:
        """Ended otherwise than ``completed``: ``error``, ``max-tokens``, ``refusal``,
        ``budget`` (stopped at a cap of its budget), ``not started``... (a run cancelled
        on purpose, ``aborted``, or stopped by Ctrl-C, ``interrupted``, is not a
        failure)."""
        return self.state == "done" and self.stop_reason not in _NOT_FAILED

    def elapsed(self, now: float | None = None) -> float:
        """Seconds from start to end (or to ``now`` while it runs)."""
        end = self.ended if self.ended is not None else (now or time.monotonic())
        return max(0.0, end - self.started)

    @property
    def title(self) -> str:
        """``[provider] "label"``, safe for a terminal (control sequences removed)."""
        label = f' "{self.label}"' if self.label else ""
        return strip_controls(f"[{self.provider}]{label}")

    def walk(self) -> Iterator[Node]:
        """This node and every node below it, depth first."""
        yield self
        for child in self.children:
            yield from child.walk()


class DelegationTree:
    """Every delegation below one lead agent, as it happens.

    Feed it with :meth:`start`, :meth:`progress` and :meth:`end` (the data of the
    bus events); read :attr:`roots`. ``clock`` is injectable for tests.
    """

    def __init__(self, lead_id: str, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.lead_id = lead_id
        self.roots: list[Node] = []
        self.nodes: dict[str, Node] = {}
        self.clock = clock
        self.started = clock()

    # -- feeding ------------------------------------------------------------------------

    def start(self, data: Mapping[str, Any]) -> Node:
        """A ``subagent/start``: a new node under the lead or under the run whose child
        agent started it."""
        run_id = str(data["run_id"])
        node = self.nodes.get(run_id)
        if node is not None:
            return node
        parent = self.nodes.get(str(data.get("parent_agent")))
        depth = int(data.get("depth") or (parent.depth + 1 if parent else 1))
        node = Node(
            run_id,
            str(data.get("provider") or "?"),
            _label(data.get("label")),
            depth,
            self.clock(),
        )
        budget = data.get("budget")
        if isinstance(budget, Mapping):
            node.budget = dict(budget)
        self._attach(node, parent)
        return node

    def progress(self, run_id: str, item: SubagentProgress) -> Node | None:
        """A ``subagent/progress`` item of ``run_id`` (its ``path`` relative to it)."""
        owner = self.nodes.get(run_id)
        if owner is None:
            return None
        if item.path:
            return self._nested(owner, item)
        self._apply(owner, item)
        return owner

    def end(self, data: Mapping[str, Any]) -> Node | None:
        """A ``subagent/end``: the node is done, with its stop reason and usage."""
        node = self.nodes.get(str(data["run_id"]))
        if node is None:
            node = self.start(data)
        usage = data.get("usage")
        if isinstance(usage, SubagentUsage):
            node.usage = usage
        elif isinstance(usage, Mapping):
            node.usage = SubagentUsage.from_json(usage)
        budget = data.get("budget")
        if isinstance(budget, Mapping) and isinstance(budget.get("spent"), Mapping):
            node.budget = dict(budget.get("caps") or node.budget or {})
            node.spent = dict(budget["spent"])
        diagnostic = data.get("diagnostic")
        self._finish(node, str(data.get("stop_reason") or "error"), diagnostic)
        return node

    def not_started(
        self, parent: Node | None, key: str, provider: str, label: str | None, why: str
    ) -> Node:
        """A delegation that could not start (the tool said so; no run exists): a node
        ended ``not started`` under ``parent`` (None: the lead), keyed by ``key``."""
        node = self.nodes.get(key)
        if node is None:
            depth = parent.depth + 1 if parent is not None else 1
            node = Node(key, provider, label, depth, self.clock())
            self._attach(node, parent)
        self._finish(node, NOT_STARTED, why)
        return node

    def interrupt(self) -> None:
        """The run was interrupted: every delegation not ended ends ``interrupted``."""
        for node in self.walk():
            if node.state != "done":
                self._finish(node, "interrupted", None)

    # -- reading --------------------------------------------------------------------------

    def walk(self) -> Iterator[Node]:
        """Every node, depth first."""
        for root in self.roots:
            yield from root.walk()

    def running(self) -> int:
        """How many delegations have not ended."""
        return sum(1 for node in self.walk() if node.state != "done")

    # -- internals ------------------------------------------------------------------------

    def _attach(self, node: Node, parent: Node | None) -> None:
        self.nodes[node.run_id] = node
        (parent.children if parent is not None else self.roots).append(node)

    def _finish(self, node: Node, stop: str, diagnostic: Any) -> None:
        if node.state == "done":
            return
        node.state = "done"
        node.stop_reason = stop
        node.diagnostic = str(diagnostic) if diagnostic else None
        node.ended = self.clock()
        node.activity = None
        node.queue_position = None

    def _nested(self, owner: Node, item: SubagentProgress) -> Node | None:
        """An item from a run nested inside ``owner`` (another process's tree)."""
        target_id = item.path[-1]
        target = self.nodes.get(target_id)
        if target is None:
            parent = owner
            for run_id in item.path[:-1]:
                parent = self.nodes.get(run_id, parent)
            target = Node(target_id, "?", None, parent.depth + 1, self.clock(), remote=True)
            self._attach(target, parent)
        if item.kind == "child_start":
            if item.provider:
                target.provider = item.provider
            if item.label:
                target.label = item.label
            return target
        if item.kind == "child_end":
            self._finish(target, item.stop_reason or "error", None)
            if item.usage is not None:
                target.usage = item.usage
            return target
        self._apply(target, item)
        return target

    def _apply(self, node: Node, item: SubagentProgress) -> None:
        kind = item.kind
        if node.state == "done":
            return
        if kind == "queued":
            node.state = "queued"
            node.queue_position = item.position
            return
        node.state = "running"
        node.queue_position = None
        if kind == "text" and item.text:
            node.text = (node.text + item.text)[-_EXCERPT:]
        elif kind == "tool_call":
            node.activity = describe_call(item)
            node.text = ""
        elif kind == "tool_update":
            if item.status in ("completed", "failed"):
                node.activity = None
        elif kind == "usage" and item.usage is not None:
            node.usage = item.usage
        elif kind == "child_start" and item.run_id is not None:
            # A nested run announced with an empty path (older transports): file it
            # under this node.
            if item.run_id not in self.nodes:
                self._attach(
                    Node(
                        item.run_id,
                        item.provider or "?",
                        _label(item.label),
                        node.depth + 1,
                        self.clock(),
                        remote=True,
                    ),
                    node,
                )
        elif kind == "child_end" and item.run_id is not None:
            nested = self.nodes.get(item.run_id)
            if nested is not None:
                self._finish(nested, item.stop_reason or "error", None)


def describe_call(item: SubagentProgress) -> str:
    """A tool call in a few words: its title, or its name and first string argument
    (``shell: pytest -q``); one line, safe for a terminal."""
    name = _one_line(item.name or "tool")
    if item.title and item.title != (item.name or "tool"):
        return _one_line(item.title)
    if isinstance(item.arguments, Mapping):
        for value in item.arguments.values():
            if isinstance(value, str) and value.strip():
                return f"{name}: {_one_line(value)}"
    return name


def _one_line(text: str, limit: int = 60) -> str:
    flat = " ".join(strip_controls(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def short_id(run_id: str) -> str:
    """A run id as the views show it: a long one by its last 8 characters (session ids
    of one process share a prefix), a short one (``acp-21643-1``) whole."""
    return run_id if len(run_id) <= 12 else run_id[-8:]


def _label(value: Any) -> str | None:
    return str(value) if value else None


def format_elapsed(seconds: float) -> str:
    """``412 ms``, ``3.2 s``, ``2 m 05 s``."""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes} m {rest:02d} s"


def format_usage(usage: SubagentUsage | None, *, short: bool = False) -> str:
    """``1,204 tokens (900 in / 304 out), $0.0031`` — empty when nothing is known."""
    if usage is None or (usage.incomplete and not usage.total_tokens and usage.cost_usd is None):
        return ""
    parts: list[str] = []
    if usage.total_tokens or not usage.incomplete:
        text = f"{usage.total_tokens:,} token{'' if usage.total_tokens == 1 else 's'}"
        if not short:
            text += f" ({usage.input_tokens:,} in / {usage.output_tokens:,} out)"
        parts.append(text)
    if usage.cost_usd is not None:
        parts.append(format_cost(usage.cost_usd))
    return ", ".join(parts)


_UNITS = {"tokens": "tokens", "seconds": "s", "children": "delegations", "turns": "model calls"}


def format_budget(node: Node, now: float | None = None) -> str:
    """``budget: 800 of 900 tokens, 2.1 of 60 s`` — its spend against each cap of its
    budget (empty without a budget)."""
    caps = node.budget
    if not caps:
        return ""
    spent = node.spending(now)
    parts: list[str] = []
    for name, cap in caps.items():
        used = spent.get(name)
        if name == "usd":
            limit, shown = f"${float(cap):.2f}", None if used is None else format_cost(used)
        elif name == "seconds":
            limit = f"{round(float(cap), 1):g} s"  # (a remainder: 29.5941 s shows as 29.6 s)
            shown = None if used is None else f"{float(used):.1f}"
        else:
            limit = f"{int(cap):,} {_UNITS.get(name, name)}"
            shown = None if used is None else f"{int(used):,}"
        parts.append(limit if shown is None else f"{shown} of {limit}")
    return "budget: " + ", ".join(parts)


def format_cost(dollars: float) -> str:
    """``$0.0312``; small amounts to the millionth (``$0.000031``), so a cheap call is
    not shown as ``$0.0000``."""
    if dollars == 0:
        return "$0"
    return f"${dollars:.6f}" if dollars < 0.001 else f"${dollars:.4f}"
