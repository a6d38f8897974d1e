"""The provider kit: what a transport's author builds a provider from.

* :class:`RemoteRun` — the lifecycle of a child outside this process (open,
  publish, turn, cancel, teardown, settle once); a transport writes the hooks. After
  a cancel, an ``aborted`` result that ``turn()`` returns within ``cancel_grace`` is
  the run's (blanks filled from the stop's reason, ``partial_output()``, ``usage()``);
  any other outcome settles ``aborted`` with ``partial_output()`` and ``usage()``.
  A run whose request has a budget is metered from this side: the transport calls
  ``report_usage()`` with the child's running usage, a reached cap stops the run
  (stop reason ``budget``), and ``budget_caps`` names the caps it can enforce (the
  others are refused at start, ``UNSUPPORTED_CAPABILITY``). :class:`RemoteBudget`
  is that meter, for a provider that is not a ``RemoteRun``.
* :class:`RemoteTimeouts` — ``start_timeout`` / ``turn_timeout`` / ``cancel_grace``,
  the same names for every provider (subclass it for your config).
* :class:`Stages` — name the stage a failure happened in.
* :func:`peer_capabilities` — ``depth_limit`` / ``budget`` as a row declares its peer
  agent honours them (acp, a2a).
* :func:`cap_diagnostic`, :func:`redact_secrets`, :func:`clean_text` — safe diagnostics.
* :class:`DelegationRelay` — for servers (``dsh acp``, ``dsh a2a``): the delegations
  under a served agent as path-relative progress items, and their usage;
  :func:`turn_usage` — what an agent's own model calls used in a span of its log.
* :func:`check_output_schema` — raise :class:`~dsh.subagent.InvalidRequest` unless a
  value is an object-rooted JSON Schema (what the runtime checks at start; a row's
  config can check it at load);
  :func:`effective_max_depth` — the depth limit a child of a parent runs under;
  :class:`Lineage` — depth, limit and descendants budget carried to a child in
  another process (at most :data:`DEFAULT_MAX_DEPTH` deep unless a row sets a number).
* :data:`LINEAGE_EXTENSION_URI` — the A2A agent card extension of an agent that
  honours :class:`Lineage` (``dsh a2a`` declares it; the ``a2a`` provider checks it);
  :func:`plain_value` — A2A metadata (a protobuf ``Struct``) as plain Python.
* :class:`BudgetMeters` — the runtime's budget meters (``ctx.subagents.meters``): a
  provider that enforces the ``budget`` capability opens a
  :class:`~dsh.subagent.BudgetMeter` for its child and feeds it the child's events.
* :func:`process_max_running` — the default cap on running children a provider of
  local processes declares (``max_running = process_max_running()``): the cores.
* :func:`taped_url` — a product's model base URL routed through the run's tape
  proxy, which :data:`TAPE_PROXY_VARIABLE` names (unchanged when none is active).

Processes (spawning in a process group, teardown, environment scrubbing) are in
the ``dsh-subprocess`` distribution (:mod:`dsh.subprocess`).
"""

from dsh.subagent._admission import process_max_running
from dsh.subagent._diagnostics import (
    DIAGNOSTIC_LIMIT,
    TRUNCATION_SUFFIX,
    cap_diagnostic,
    clean_text,
    redact_secrets,
)
from dsh.subagent._lineage import DEFAULT_MAX_DEPTH, LINEAGE_EXTENSION_URI, Lineage, plain_value
from dsh.subagent._meter import BudgetMeters
from dsh.subagent._relay import DelegationRelay, RelayWatch, turn_usage
from dsh.subagent._remote import RemoteRun
from dsh.subagent._remote_budget import RemoteBudget
from dsh.subagent._remote_config import (
    DEFAULT_TURN_TIMEOUT,
    RemoteTimeouts,
    Stages,
    peer_capabilities,
)
from dsh.subagent._tape_route import TAPE_PROXY_VARIABLE, taped_url
from dsh.subagent._validation import check_output_schema, effective_max_depth

__all__ = [
    "DEFAULT_MAX_DEPTH",
    "DEFAULT_TURN_TIMEOUT",
    "DIAGNOSTIC_LIMIT",
    "LINEAGE_EXTENSION_URI",
    "TAPE_PROXY_VARIABLE",
    "TRUNCATION_SUFFIX",
    "BudgetMeters",
    "DelegationRelay",
    "Lineage",
    "RelayWatch",
    "RemoteBudget",
    "RemoteRun",
    "RemoteTimeouts",
    "Stages",
    "cap_diagnostic",
    "check_output_schema",
    "clean_text",
    "effective_max_depth",
    "peer_capabilities",
    "plain_value",
    "process_max_running",
    "redact_secrets",
    "taped_url",
    "turn_usage",
]
