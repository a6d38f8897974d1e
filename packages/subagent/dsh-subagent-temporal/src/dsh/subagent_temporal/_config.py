"""Configuration of one ``temporal`` provider instance (one ``[[plugin]]`` row)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from dsh.subagent.kit import RemoteTimeouts

__all__ = ["DEFAULT_TASK_QUEUE", "RetryConfig", "TemporalProviderConfig"]

DEFAULT_TASK_QUEUE = "dsh-delegations"

_SECRETS = {
    "api_key": "TEMPORAL_API_KEY",
    "tls": "TEMPORAL_TLS",
    "tls_cert": "TEMPORAL_TLS_CLIENT_CERT_PATH",
    "tls_key": "TEMPORAL_TLS_CLIENT_KEY_PATH",
    "tls_ca": "TEMPORAL_TLS_SERVER_CA_CERT_PATH",
    "client_cert": "TEMPORAL_TLS_CLIENT_CERT_PATH",
    "client_key": "TEMPORAL_TLS_CLIENT_KEY_PATH",
}

Capability = Literal["output_schema", "depth_limit", "tool_filter", "persona", "budget"]
_FULL_INNER = ("spawn", "fork")
"""Inner providers that honour every start capability (in-process agents)."""


class RetryConfig(BaseModel):
    """How often a delegation is tried again when its worker is lost or fails.

    A retry runs the child again from the start on whichever worker takes it (see
    docs/providers/temporal.md for what that repeats). A child that *ends* (even with
    stop reason ``error``) is not retried."""

    model_config = ConfigDict(extra="forbid")

    maximum_attempts: int = Field(3, ge=0)
    """Attempts in all (0: unlimited, bounded by ``schedule_to_close_timeout``)."""
    initial_interval: float = Field(1.0, gt=0)
    """Seconds before the first retry."""
    backoff_coefficient: float = Field(2.0, ge=1)
    """Each further wait is the one before times this."""
    maximum_interval: float = Field(60.0, gt=0)
    """Longest wait between two attempts, in seconds."""


class TemporalProviderConfig(RemoteTimeouts):
    """Config of ``dsh-subagent-temporal``::

        [[plugin]]
        name = "dsh-subagent-temporal"
        config = { provider = "acp", result_store = "file:///mnt/shared/dsh-results" }

    The server comes from ``address`` / ``namespace`` here, else from the standard
    Temporal environment (``TEMPORAL_ADDRESS``, ``TEMPORAL_NAMESPACE``, a
    ``TEMPORAL_PROFILE`` of ``TEMPORAL_CONFIG_FILE``), else ``localhost:7233`` /
    ``default``. Credentials only ever come from the environment
    (``TEMPORAL_API_KEY``, ``TEMPORAL_TLS*``): a preset that names one fails to load.
    """

    name: str = Field("temporal", pattern=r"^[A-Za-z0-9_.:-]{1,64}$")
    """Provider name in ``ctx.subagents``."""
    provider: str = Field("spawn", min_length=1)
    """The provider that runs the child on the worker (registered by the worker's
    preset): ``spawn``, ``acp``, ``codex``, ``claude-code``..."""
    agent_options: dict[str, Any] | None = None
    """``agent_options`` for the inner provider (a request's own win, key by key)."""
    capabilities: list[Capability] | None = None
    """Start capabilities the inner provider has on the workers (default: all five
    for ``spawn`` / ``fork``, none otherwise); requests needing others are refused
    before anything starts. ``budget``: the worker starts the child with the
    delegation's budget, and the inner provider enforces it (``spawn``, ``fork``;
    ``acp`` with ``budget = true``...); one that cannot ends the delegation ``error``."""
    address: str | None = None
    """``host:port`` of the Temporal frontend (default: environment, else localhost:7233)."""
    namespace: str | None = None
    """Temporal namespace (default: environment, else ``default``)."""
    task_queue: str = Field(DEFAULT_TASK_QUEUE, min_length=1)
    """The queue the workers (``dsh worker --task-queue``) poll."""
    start_to_close_timeout: float = Field(3600.0, gt=0)
    """Seconds one attempt of the child may run on a worker."""
    heartbeat_timeout: float = Field(10.0, gt=0)
    """Seconds without a heartbeat after which an attempt's worker counts as lost
    (the attempt is retried elsewhere; a cancel settles within this + 2 s)."""
    schedule_to_close_timeout: float | None = Field(None, gt=0)
    """Seconds for every attempt together, queueing included (default: no limit)."""
    retry: RetryConfig = RetryConfig()
    """How often a lost or failed attempt is tried again (a child that *ends*, even
    with stop reason ``error``, is not): ``maximum_attempts``, ``initial_interval``,
    ``backoff_coefficient``, ``maximum_interval``."""
    result_store: str | None = None
    """Where bodies over ``inline_limit`` travel (``file:///shared/dir``, an absolute
    path or ``module:attribute``); the workers need the same (``--result-store``)."""
    inline_limit: int = Field(64 * 1024, ge=1024, le=1024 * 1024)
    """Bytes of prompt or result carried inside Temporal; larger ones go through the
    result store (without one, a larger prompt is refused and a larger result is cut)."""
    batch_max: int = Field(100, ge=1, le=1000)
    """Delegations started together that share one workflow (a larger fan-out is split
    over several): with ``inline_limit`` it bounds a workflow's history (about
    ``batch_max`` × ``inline_limit`` at worst) and its pending activities."""
    batch_window: float = Field(0.005, ge=0, le=1)
    """Seconds a start waits for others to share its workflow (a fan-out's starts
    arrive within microseconds of each other)."""
    journal: str | None = None
    """JSONL file recording the delegations this parent started and collected, so a
    restarted parent finds the ones it still has to collect (:meth:`outstanding`).
    Default: ``temporal-<name>.jsonl`` in the sessions directory, if the context has
    one; ``"off"``: none."""
    detach_on_close: bool = True
    """When the parent's context closes with delegations still running (and their
    signal not aborted), leave them running for a restarted parent to reconnect to,
    instead of cancelling them."""
    progress_interval: float = Field(0.5, gt=0)
    """Seconds between looks at a running delegation's progress, while someone listens."""
    id_prefix: str = Field("dsh-", pattern=r"^[A-Za-z0-9._:-]{0,32}$")
    """Prefix of run ids (= workflow ids)."""

    # the kit's limits, with defaults for a durable child
    start_timeout: float = Field(30.0, gt=0)
    turn_timeout: float | None = Field(None, gt=0)
    """No limit by default: ``start_to_close_timeout`` and the retry policy bound a
    delegation on the workers' side. When set, the workflow also cancels the delegation
    itself ``turn_timeout`` + ``cancel_grace`` + 1 s after it started (a backstop for
    when the parent cannot reach the server)."""
    cancel_grace: float = Field(11.5, ge=0)
    """Seconds a cancelled delegation gets to confirm (default: ``heartbeat_timeout`` +
    1.5, so a cancel settles within heartbeat timeout + 2 s even when the worker is
    gone); then the workflow is terminated and the run settles ``aborted``."""

    @model_validator(mode="after")
    def _grace_follows_heartbeat(self) -> TemporalProviderConfig:
        if "cancel_grace" not in self.model_fields_set:
            self.cancel_grace = self.heartbeat_timeout + 1.5
        return self

    @model_validator(mode="before")
    @classmethod
    def _no_secrets(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key in data:
                variable = _SECRETS.get(str(key).lower())
                if variable is not None:
                    raise ValueError(
                        f"{key!r} cannot be set in a preset: credentials come from the"
                        f" environment only ({variable}; see docs/providers/temporal.md)"
                    )
        return data

    @field_validator("address")
    @classmethod
    def _host_port(cls, value: str | None) -> str | None:
        if value is not None and (":" not in value or "://" in value):
            raise ValueError(f"address must be host:port, got {value!r}")
        return value

    def inner_capabilities(self) -> tuple[str, ...]:
        """Capabilities of the inner provider (configured, else by its name)."""
        if self.capabilities is not None:
            return tuple(self.capabilities)
        if self.provider in _FULL_INNER:
            return ("output_schema", "depth_limit", "tool_filter", "persona", "budget")
        return ()
