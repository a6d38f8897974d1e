"""What travels through Temporal: the delegation's input, its outcome, and the
heartbeat details that carry live progress.

Plain dataclasses of JSON types (the SDK's default converter reads them back by
their type hints); stdlib only, so the workflow module can import this file inside
the workflow sandbox. Every field has a default, so a newer parent and an older
worker (or the other way round) still read each other's payloads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ACTIVITY_NAME",
    "CANCEL_SIGNAL",
    "NON_RETRYABLE",
    "SINGLE_ACTIVITY",
    "WORKER_SHUTDOWN",
    "WORKFLOW_NAME",
    "BatchResult",
    "BlobRef",
    "CancelRequest",
    "DelegationBatch",
    "DelegationOutcome",
    "DelegationSpec",
    "RetrySpec",
    "blob_key",
    "split_run_id",
]

WORKFLOW_NAME = "dsh.Delegations"
"""The workflow type delegations run as: one workflow per batch of delegations
started together (a lone delegation is a batch of one, whose workflow id is its run id)."""
CANCEL_SIGNAL = "cancel"
"""The signal that cancels some delegations of a batch (:class:`CancelRequest`)."""
SINGLE_ACTIVITY = "child"
"""The activity id of a lone delegation (its run id is the workflow id)."""
ACTIVITY_NAME = "dsh.run_delegation"
"""The activity that runs the child on a worker."""
NON_RETRYABLE = "DshDelegationRefused"
"""Application error type of a delegation no worker can run (bad request, unknown
inner provider): never retried."""
WORKER_SHUTDOWN = "DshWorkerShutdown"
"""Application error type of an attempt cut short by its worker's shutdown (retried
on another worker)."""

_KEY_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass
class RetrySpec:
    """The activity's retry policy (a retry runs the child again on any worker)."""

    maximum_attempts: int = 3
    initial_interval: float = 1.0
    backoff_coefficient: float = 2.0
    maximum_interval: float = 60.0


@dataclass
class BlobRef:
    """A body kept in the shared result store instead of the workflow history."""

    key: str
    size: int
    sha256: str


@dataclass
class DelegationSpec:
    """The workflow's input: what to run, where, and under which limits."""

    run_id: str = ""
    activity_id: str = SINGLE_ACTIVITY
    """The delegation's activity in its batch's workflow."""
    provider: str = "spawn"
    """The provider on the worker that runs the child (registered by the worker's preset)."""
    prompt: list[dict[str, Any]] | None = None
    prompt_ref: BlobRef | None = None
    """The prompt's content blocks (JSON) in the result store, when too large to inline."""
    label: str | None = None
    agent_options: dict[str, Any] | None = None
    output_schema: dict[str, Any] | None = None
    max_depth: int | None = None
    tool_filter: dict[str, Any] | None = None
    """``{"allow": [...] | None, "deny": [...]}``."""
    persona: str | None = None
    depth: int = 1
    """The child's delegation depth (its parent's + 1)."""
    inherited_max_depth: int | None = None
    parent_session: str | None = None
    start_to_close_timeout: float = 3600.0
    heartbeat_timeout: float = 10.0
    schedule_to_close_timeout: float | None = None
    retry: RetrySpec = field(default_factory=RetrySpec)
    inline_limit: int = 64 * 1024
    """Bytes of result body above which the worker stores it by reference."""
    trace: dict[str, str] = field(default_factory=dict)
    """W3C trace-context headers of the delegation (empty unless the parent traces)."""
    turn_deadline: float | None = None
    """Seconds after the workflow started at which the workflow cancels this delegation
    itself (the parent's ``turn_timeout`` + ``cancel_grace`` + a margin): the backstop
    for a parent that could not deliver its own stop. None: no deadline."""
    budget: dict[str, Any] | None = None
    """The budget the child and its whole tree run under on the worker
    (``Budget.to_json()``: the request's caps within what every budget above has left
    when the delegation started). A retried attempt gets it less what the attempts
    before it reported spending. None: no budget."""


@dataclass
class DelegationOutcome:
    """The workflow's result: how the child ended (the body, or a reference to it)."""

    stop_reason: str = "error"
    output: str = ""
    structured: Any = None
    diagnostic: str | None = None
    usage: dict[str, Any] | None = None
    """What the child's tree used, this attempt's and (as their last heartbeats
    reported) the attempts' before it."""
    body_ref: BlobRef | None = None
    """``{"output", "structured"}`` as JSON in the result store (then ``output`` is "")."""
    attempt: int = 1
    worker: str = ""
    """Identity of the worker that ran the attempt that ended it."""
    progress: list[dict[str, Any]] = field(default_factory=list)
    """The last progress items (``{"seq", "item"}``), for a parent that polls less often."""


@dataclass
class DelegationBatch:
    """The workflow's input: delegations a parent started together."""

    specs: list[DelegationSpec] = field(default_factory=list)


@dataclass
class CancelRequest:
    """Cancel these delegations of the batch (activity ids) with ``reason``."""

    activity_ids: list[str] = field(default_factory=list)
    reason: str = "cancelled by the parent"


@dataclass
class BatchResult:
    """The workflow's result: the outcomes of delegations whose activity did not
    complete (cancelled before it started, every attempt failed...), by activity id.
    The others' outcomes are their activities' results, in the workflow history."""

    outcomes: dict[str, DelegationOutcome] = field(default_factory=dict)


def split_run_id(run_id: str) -> tuple[str, str]:
    """``(workflow id, activity id)`` of a run id: ``W`` (a lone delegation) or ``W/N``."""
    workflow_id, slash, activity_id = run_id.rpartition("/")
    if not slash:
        return run_id, SINGLE_ACTIVITY
    return workflow_id, activity_id


def blob_key(run_id: str, name: str) -> str:
    """A store key for ``name`` of run ``run_id`` (safe as a file name)."""
    safe = _KEY_UNSAFE.sub("_", run_id)[:120].lstrip(".") or "run"
    return f"{safe}/{_KEY_UNSAFE.sub('_', name)}"
