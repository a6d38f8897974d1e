"""dsh.subagent_temporal — durable, distributed delegation on Temporal.

The ``temporal`` provider turns a delegation into a Temporal workflow whose id is
the run id; the child runs in one heartbeating activity on whichever ``dsh worker``
takes it, through an ordinary provider of that worker's preset::

    [[plugin]]
    name = "dsh-subagent-temporal"
    config = { provider = "acp", result_store = "file:///mnt/shared/dsh-results" }

and on each worker host::

    dsh worker --preset worker.toml --task-queue dsh-delegations \\
               --result-store file:///mnt/shared/dsh-results

A parent that restarts finds what it still has to collect
(:meth:`TemporalProvider.outstanding`) and reconnects by run id
(:meth:`TemporalProvider.reconnect`). See docs/providers/temporal.md.
"""

from dsh.subagent_temporal._config import DEFAULT_TASK_QUEUE, RetryConfig, TemporalProviderConfig
from dsh.subagent_temporal._journal import DelegationJournal, JournalEntry
from dsh.subagent_temporal._plugin import plugin
from dsh.subagent_temporal._provider import TemporalProvider
from dsh.subagent_temporal._spec import WORKFLOW_NAME, BlobRef, DelegationOutcome, DelegationSpec
from dsh.subagent_temporal._store import DirectoryResultStore, ResultStore, StoreError, open_store

__all__ = [
    "DEFAULT_TASK_QUEUE",
    "WORKFLOW_NAME",
    "BlobRef",
    "DelegationJournal",
    "DelegationOutcome",
    "DelegationSpec",
    "DirectoryResultStore",
    "JournalEntry",
    "ResultStore",
    "RetryConfig",
    "StoreError",
    "TemporalProvider",
    "TemporalProviderConfig",
    "open_store",
    "plugin",
]
