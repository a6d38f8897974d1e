"""Configuration of one ``acp`` provider instance (one ``[[plugin]]`` row)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from dsh.jsonrpc import DEFAULT_MAX_LINE_BYTES
from dsh.subprocess import PoolConfig, SubprocessConfig

__all__ = ["AcpProviderConfig", "WorkspaceTools"]

_WORKSPACES = ("own", "shared")


class WorkspaceTools(BaseModel):
    """Which of the parent's tools serve a ``workspace = "shared"`` child, by name
    (a dsh-tool-fs row with a ``prefix``, a shell tool named otherwise)."""

    model_config = ConfigDict(extra="forbid")

    read: str = Field("read_file", min_length=1)
    """Serves ``fs/read_text_file`` (a dsh-tool-fs ``read_file``)."""
    write: str = Field("write_file", min_length=1)
    """Serves ``fs/write_text_file`` (a dsh-tool-fs ``write_file``)."""
    shell: str = Field("shell", min_length=1)
    """Serves ``terminal/*`` (a dsh-tool-shell tool)."""


class AcpProviderConfig(SubprocessConfig):
    """Config of ``dsh-subagent-acp``: which agent command to run, and how.

    ::

        [[plugin]]
        name = "dsh-subagent-acp"
        config = { command = "dsh", args = ["acp", "--preset", "child.toml"],
                   passthrough_env = ["DEEPSEEK_API_KEY"], depth_limit = true }

    ``command``, ``args``, ``cwd``, ``env``, ``passthrough_env``, ``eof_grace``,
    ``term_grace``, ``start_timeout``, ``turn_timeout`` and ``cancel_grace`` are
    the fields every subprocess provider shares (:class:`dsh.subprocess.SubprocessConfig`).
    """

    command: str = Field(..., min_length=1)
    """The agent executable (looked up on the child's ``PATH``)."""
    name: str = Field("acp", pattern=r"^[A-Za-z0-9_.:-]{1,64}$")
    """Provider name in ``ctx.subagents``; give each row its own to run several agents."""
    permission: Literal["reject", "allow"] = "reject"
    """How the agent's permission requests are answered: ``reject`` selects a
    reject option, ``allow`` an allow-once option. An agent only asks in a mode that
    asks: see ``session_mode``."""
    session_mode: str | None = Field(None, min_length=1, max_length=128)
    """The ACP session mode (its id) the agent is put in after ``session/new``, with
    ``session/set_mode`` unless it is in it already. Unset: under ``permission =
    "reject"``, a mode that asks before acting (the first offered of ``default``,
    ``read-only``), when the agent offers modes; under ``allow``, the agent's own."""
    on_unconfirmed: Literal["refuse", "warn"] | None = None
    """What happens when the agent does not confirm that mode (it offers no mode that
    asks, or not ``session_mode``, or answers ``session/set_mode`` with an error; with
    ``session_mode`` set, also when it offers no modes at all): ``refuse`` fails the
    start with a diagnostic, ``warn`` logs a warning and runs the agent in its own
    mode. Unset: ``refuse`` under ``permission = "reject"`` (an agent that approves
    its own tool calls would make the policy a lie), ``warn`` under ``allow``."""
    depth_limit: bool = False
    """The agent honours dsh's delegation depth limit (``dsh acp`` does): the provider
    then has the ``depth_limit`` capability, so a numeric ``max_depth`` can be asked
    for, and the start fails unless the agent confirms it in ``initialize``. The
    depth and the inherited limit are sent to every agent either way."""
    budget: bool = False
    """The agent enforces the budget dsh sends it in ``_meta.dsh.budget`` on its own
    tree and reports the stop back (``dsh acp`` does): the provider then has the
    ``budget`` capability, and a start with a budget fails
    (``UNSUPPORTED_CAPABILITY``) unless the agent confirms it in ``initialize``
    (``agentCapabilities._meta.dsh.budget``). The run's time cap, and the tokens and
    cost the agent reports in its usage updates, are also enforced from this side."""
    stdout_garbage: Literal["error", "skip"] = "error"
    """What a line on the agent's stdout that is not JSON does: fail the run
    (``error``), or get skipped (``skip``, for agents that print banners)."""
    max_message_bytes: int = Field(DEFAULT_MAX_LINE_BYTES, ge=1024)
    """Largest single message accepted from the agent (a longer line fails the run)."""
    workspace: Literal["own", "shared"] = "own"
    """Whose files and terminals the agent uses. ``own`` (the default): the agent
    reads, writes and runs commands itself, in its process. ``shared``: dsh tells the
    agent in ``initialize`` that the client serves ``fs.readTextFile``,
    ``fs.writeTextFile`` and ``terminal``, and answers those requests with the
    delegating agent's own tools (``workspace_tools``), under its confinement,
    protected paths, sandbox and permissions; every request is a progress item of
    the run, and every terminal dies with it."""
    workspace_tools: WorkspaceTools = WorkspaceTools()
    """The parent's tools that serve a shared workspace, e.g. ``{ read = "fs_read_file",
    write = "fs_write_file", shell = "sh" }``."""
    pool: PoolConfig = PoolConfig()
    """Warm agent processes, e.g. ``{ size = 2, max_runs = 50, idle_timeout = 300 }``:
    each run then takes an initialized agent and opens its own session on it (one
    run per process at a time). Off by default (``size = 0``): children of one
    process share what the agent keeps in memory between sessions; see the docs."""

    @field_validator("workspace", mode="before")
    @classmethod
    def _known_workspace(cls, value: Any) -> Any:
        if value not in _WORKSPACES:
            raise ValueError(
                f'workspace = {value!r} is not a workspace: use "own" (the default: the'
                ' agent reads, writes and runs commands itself) or "shared" (dsh serves'
                " the agent's fs/* and terminal/* requests with the parent's own tools)"
            )
        return value

    @property
    def unconfirmed_policy(self) -> Literal["refuse", "warn"]:
        """``on_unconfirmed``, or its default for the ``permission`` policy."""
        if self.on_unconfirmed is not None:
            return self.on_unconfirmed
        return "refuse" if self.permission == "reject" else "warn"
