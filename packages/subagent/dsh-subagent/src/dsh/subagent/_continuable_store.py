"""Continuable children read back from the session store: load, ancestry, listing.

Functions over the context and the registry's records (``children``: the records
this process knows, by child id), so that the registry of continuable children
(:mod:`dsh.subagent._continuable`) keeps only the live side.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from dsh.core.sessions import Event, SessionError
from dsh.subagent._activation_lock import ActivationLock
from dsh.subagent._continuable_record import CHILD_EVENT, SPEC_EVENT, ContinuableChild, find_spec
from dsh.subagent._errors import DuplicateChild, NotResumable, SubagentError

if TYPE_CHECKING:
    from dsh.core import Agent, Context

__all__ = ["ListScope", "acquire_lock", "is_ancestor", "list_children", "load_record"]

ListScope = Literal["children", "descendants"]

_MAX_CHAIN = 64


def load_record(ctx: Context, agent_id: str) -> tuple[ContinuableChild, Sequence[Event]]:
    """A detached record of a persisted child, and its events."""
    store = ctx.sessions
    if store is None:
        raise NotResumable(
            f'no continuable subagent "{agent_id}" is live, and this context keeps no'
            " sessions on disk to resume one from (open it with a sessions_dir)",
        )
    try:
        loaded = store.load(agent_id)
    except SessionError as exc:
        raise NotResumable(f'subagent "{agent_id}" cannot be resumed: {exc}') from None
    meta = loaded.header.meta
    seed_length = int(meta.get("seed_length", 0))
    spec = find_spec(loaded.events, agent_id, seed_length)
    if spec is None or loaded.header.parent_session is None:
        raise NotResumable(
            f'"{agent_id}" is not a continuable subagent (its session has no {SPEC_EVENT} record)',
        )
    record = ContinuableChild(
        agent_id,
        str(spec.get("provider")),
        loaded.header.parent_session,
        spec.get("label"),
        depth=int(meta.get("delegation_depth", 1)),
        spec=spec,
    )
    record.refresh_from(loaded.events, seed_length)
    return record, loaded.events


def is_ancestor(
    ctx: Context, children: Mapping[str, ContinuableChild], caller_id: str, record: ContinuableChild
) -> bool:
    """True if agent ``caller_id`` is above ``record``'s child (live, known or persisted)."""
    parent_id: str | None = record.parent_id
    for _ in range(_MAX_CHAIN):
        if parent_id is None:
            return False
        if parent_id == caller_id:
            return True
        parent_id = _parent_of(ctx, children, parent_id)
    return False


def _parent_of(ctx: Context, children: Mapping[str, ContinuableChild], agent_id: str) -> str | None:
    live = ctx.agents.get(agent_id)
    if live is not None:
        return live.parent_id
    record = children.get(agent_id)
    if record is not None:
        return record.parent_id
    store = ctx.sessions
    if store is None:
        return None
    try:
        return store.load(agent_id).header.parent_session
    except SessionError:
        return None


def acquire_lock(ctx: Context, agent_id: str) -> ActivationLock | None:
    """The activation lock of a persisted child (None: nothing on disk to lock);
    ``DUPLICATE_CHILD`` when another process holds it."""
    store = ctx.sessions
    if store is None or not store.exists(agent_id):
        return None
    lock = ActivationLock(store.directory / f"{agent_id}.lock")
    holder = lock.try_acquire()
    if holder is not None:
        raise DuplicateChild(
            f'subagent "{agent_id}" already has a live activation in another process'
            f" (pid {holder}); a child runs in one place at a time",
        )
    return lock


def list_children(
    ctx: Context,
    children: Mapping[str, ContinuableChild],
    caller: Agent,
    scope: ListScope = "children",
) -> builtins.list[ContinuableChild]:
    """The continuable children (or all descendants) of ``caller``, oldest first
    (see :meth:`~dsh.subagent.ContinuableChildren.list`)."""
    found: builtins.list[ContinuableChild] = []
    seen: set[str] = {caller.id}
    frontier: builtins.list[tuple[str, Sequence[Event]]] = [(caller.id, caller.session.events)]
    while frontier:
        parent_id, events = frontier.pop(0)
        for child_id, label in _child_ids(children, parent_id, events):
            if child_id in seen:
                continue
            seen.add(child_id)
            record, child_events = _snapshot(ctx, children, child_id, parent_id, label)
            found.append(record)
            if scope == "descendants" and child_events is not None:
                frontier.append((child_id, child_events))
    return found


def _child_ids(
    children: Mapping[str, ContinuableChild], parent_id: str, events: Sequence[Event]
) -> builtins.list[tuple[str, Any]]:
    ids: dict[str, Any] = {}
    for event in events:
        if event.type == CHILD_EVENT and event.data.get("parent_agent") == parent_id:
            ids.setdefault(str(event.data.get("agent_id")), event.data.get("label"))
    for record in children.values():
        if record.parent_id == parent_id:
            ids.setdefault(record.id, record.label)
    return list(ids.items())


def _snapshot(
    ctx: Context,
    children: Mapping[str, ContinuableChild],
    child_id: str,
    parent_id: str,
    label: Any,
) -> tuple[ContinuableChild, Sequence[Event] | None]:
    record = children.get(child_id)
    if record is not None and record.agent is not None:
        return record, record.agent.session.events
    if ctx.sessions is None:
        if record is not None:
            return record, ()
        return _unreadable(child_id, parent_id, label, "its session is not on disk"), None
    try:
        return load_record(ctx, child_id)
    except SubagentError as exc:
        return _unreadable(child_id, parent_id, label, exc.message), None


def _unreadable(child_id: str, parent_id: str, label: Any, why: str) -> ContinuableChild:
    return ContinuableChild(
        child_id,
        "unknown",
        parent_id,
        label if isinstance(label, str) else None,
        last_status="failed",
        diagnostic=why,
        readable=False,
    )
