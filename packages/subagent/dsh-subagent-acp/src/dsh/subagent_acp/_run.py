"""One ``acp`` run on the provider kit: spawn, ``initialize``, ``session/new``,
``session/prompt``, ``session/cancel``; the kit does the rest.

With a warm pool the run takes an initialized agent process instead of starting
one, opens its own session on it (in the run's cwd, with the run's lineage in
``_meta.dsh``), and gives the process back when done: after ``session/close``
(where the agent advertises it) if the turn ended cleanly, else the process is
recycled.
"""

from __future__ import annotations

from typing import Any

from dsh.subagent import (
    RunHandle,
    StartFailed,
    SubagentResult,
    SubagentStartRequest,
    SubagentUsage,
    UnsupportedCapability,
)
from dsh.subagent_acp._agent import AcpAgentProcess, describe_failure
from dsh.subagent_acp._config import AcpProviderConfig
from dsh.subagent_acp._connection import AcpConnection, LinkError, RemoteError
from dsh.subagent_acp._fold import SessionFold
from dsh.subagent_acp._modes import select_mode
from dsh.subagent_acp._workspace import WORKSPACE_METHODS, SharedWorkspace
from dsh.subprocess import PooledRun, ProcessPool

__all__ = ["STOP_REASONS", "AcpRun"]

STOP_REASONS = {
    "end_turn": "completed",
    "max_tokens": "max-tokens",
    "refusal": "refusal",
    "cancelled": "aborted",
}
"""ACP stop reason → dsh stop reason; any other ACP reason is ``error``."""

_PREFERENCE: dict[str, tuple[str, ...]] = {
    "allow": ("allow_once", "allow_always"),
    "reject": ("reject_once", "reject_always"),
}
_CLEAN_STOPS = frozenset({"end_turn", "max_tokens", "refusal"})
"""ACP stop reasons after which the agent process is fit for another run."""
_SESSION_CLOSE_BOUND = 5.0
"""Seconds a pooled agent gets to confirm ``session/close`` before it is recycled."""


class AcpRun(PooledRun[AcpAgentProcess]):
    """The state of one run: its process, its connection, its session."""

    config: AcpProviderConfig

    def __init__(
        self,
        provider: str,
        request: SubagentStartRequest,
        config: AcpProviderConfig,
        pool: ProcessPool[AcpAgentProcess] | None = None,
    ) -> None:
        super().__init__(provider, request, config, pool)
        self.passes_telemetry = True  # a dsh acp child traces with OTEL_* and DSH_OTEL
        self.fold = SessionFold()
        self.session_id: str | None = None
        self.decisions: dict[str, int] = {}
        """How many permission requests got each answer (option kind or ``cancelled``)."""
        self.cancelled = False
        self.mode: str | None = None
        """The session mode the agent confirmed (None: none, or not known)."""
        self.mode_warning: str | None = None
        """Why the agent runs in its own mode although the row wanted another
        (``on_unconfirmed = "warn"``)."""
        self.workspace: SharedWorkspace | None = None
        """What serves the agent's ``fs/*`` and ``terminal/*`` (``workspace = "shared"``;
        made at the first such request)."""
        self._reported_usage = SubagentUsage.unknown()
        self._clean = False

    @property
    def agent(self) -> AcpAgentProcess | None:
        """The agent process (its own, or one taken from the pool)."""
        return self.process

    @property
    def conn(self) -> AcpConnection | None:
        """The agent process's connection."""
        process = self.process
        return process.conn if process is not None else None

    # -- the hooks --------------------------------------------------------------------

    async def open(self) -> None:
        """Spawn the agent and ``initialize`` it (or take a warm one), ``session/new``,
        then the row's session mode (:mod:`._modes`)."""
        if self.pool is not None and not self.usable_pool(self.pool, self.child_env(lineage=False)):
            self.pool = None  # another environment or sandbox than the pool's: its own process
        if self.pool is None:
            child = await self.spawn(what=f"{self.provider} agent")
            self.take(AcpAgentProcess(child, self.config))
            assert self.agent is not None
            await self.agent.initialize({"dsh": self.lineage.meta()}, self.stages)
            await self._start_session()
            return
        await self.start_on_pool(self._start_session, died=_died)

    async def _start_session(self) -> None:
        """A budget checked against the initialized agent, then ``session/new``."""
        self._check_budget()
        await self._new_session()

    def _check_budget(self) -> None:
        """A budget needs an agent that confirmed it enforces one."""
        assert self.agent is not None
        if self.request.budget is not None and not self.agent.enforces_budget:
            raise UnsupportedCapability(
                f'subagent provider "{self.provider}": the agent does not confirm that it'
                " enforces dsh's budget (agentCapabilities._meta.dsh.budget in initialize),"
                " so a run with a budget cannot be started on it; use an agent that does"
                " (dsh acp), or delegate without a budget"
            )

    def attach(self, process: AcpAgentProcess) -> None:
        """The agent's updates and requests come to this run."""
        process.user = self

    def detach(self, process: AcpAgentProcess) -> None:
        """The agent's updates and requests no longer come to this run."""
        if process.user is self:
            process.user = None

    async def _new_session(self) -> None:
        assert self.conn is not None
        self.stages.enter("session/new")
        session = await self.conn.request(
            "session/new",
            {"cwd": self.cwd, "mcpServers": [], "_meta": {"dsh": self.lineage.meta()}},
        )
        session_id = session.get("sessionId") if isinstance(session, dict) else None
        if not isinstance(session_id, str) or not session_id:
            raise StartFailed(
                f"{self.provider} session/new failed: the agent answered without a sessionId"
            )
        self.session_id = self.fold.session_id = session_id
        self.mode, self.mode_warning = await select_mode(
            self.conn, session_id, session, self.config, self.stages
        )

    async def turn(self) -> SubagentResult:
        """``session/prompt`` with the prompt's text blocks; map the stop reason."""
        assert self.conn is not None
        self.stages.enter("session/prompt")
        if self.budget is not None:
            self.fold.on_usage = self.report_usage
        blocks = [
            {"type": "text", "text": str(block.get("text", ""))}
            for block in self.request.prompt_blocks
            if block.get("type") == "text"
        ]
        # W3C trace context of this delegation (ACP reserves the _meta keys traceparent,
        # tracestate, baggage for it); empty unless a tracing plugin (dsh-otel) is loaded
        trace = self.request.parent.ctx.tracing.headers(self.handle.id if self.handle else None)
        response = await self.conn.request(
            "session/prompt",
            {
                "sessionId": self.session_id,
                "prompt": blocks,
                "_meta": {"dsh": self.lineage.meta(), **trace},
            },
        )
        if not isinstance(response, dict) or not isinstance(response.get("stopReason"), str):
            raise LinkError(
                f"the agent's answer to session/prompt has no stopReason: {str(response)[:200]}",
                "protocol",
            )
        self._reported_usage = _usage_of(response.get("usage"))
        acp_reason = response["stopReason"]
        self._clean = acp_reason in _CLEAN_STOPS
        stop = STOP_REASONS.get(acp_reason, "error")
        diagnostic: str | None = None
        budget = _budget_stop(response)
        if budget is not None:  # a dsh child stopped at its budget (``cancelled`` on the wire)
            return SubagentResult(
                self.fold.output(), "budget", diagnostic=budget, usage=self._reported_usage
            )
        if stop == "aborted":
            if not self.cancelled:  # (cancelled by dsh: the kit's reason says why)
                diagnostic = "the agent reported its turn cancelled although dsh did not cancel it"
        elif stop != "completed":
            diagnostic = f"the agent stopped with stop reason {acp_reason!r}"
        if diagnostic is not None:
            diagnostic = self._with_permissions(f"{self.provider} session/prompt: {diagnostic}")
        return SubagentResult(
            self.fold.output(), stop, diagnostic=diagnostic, usage=self._reported_usage
        )

    async def cancel(self) -> bool:
        """``session/cancel``; later permission requests are answered ``cancelled``."""
        self.cancelled = True
        if self.conn is None or self.session_id is None:
            return False
        return await self.conn.notify("session/cancel", {"sessionId": self.session_id})

    async def close(self) -> None:
        """Its own process: stop reading, then tear the process tree down. A pooled
        one: ``session/close`` and back to the pool after a clean turn, else recycled."""
        if self.workspace is not None:
            await self.workspace.close()  # its terminals die with the run
        await super().close()

    async def reusable(self, process: AcpAgentProcess) -> bool:
        """A clean turn on a healthy process, whose session closed if it can be."""
        return (
            self._clean
            and process.healthy
            and (
                not process.closes_sessions
                or self.session_id is None
                or await process.close_session(self.session_id, _SESSION_CLOSE_BOUND)
            )
        )

    def kill_now(self) -> None:
        """SIGKILL the agent's tree (a pooled one only while this run holds it) and
        every terminal's."""
        if self.workspace is not None:
            self.workspace.kill_now()
        super().kill_now()

    def partial_output(self) -> str:
        """The text of the last agent message so far."""
        return self.fold.output()

    def usage(self) -> SubagentUsage:
        """The usage the agent reported with its answer (unknown until then)."""
        return self._reported_usage

    def describe(self, error: BaseException) -> str:
        """The stage and the link's own words, plus the permission answers given."""
        return self._with_permissions(describe_failure(self.stages, error))

    def details(self) -> str:
        """Notices the agent sent, then its stderr tail (of a pooled process: what it
        wrote while this run held it)."""
        parts = []
        if self.mode_warning:
            parts.append(self.mode_warning)
        if self.fold.notices:
            parts.append("agent notices: " + "; ".join(self.fold.notices[-3:]))
        tail = super().details()
        if tail:
            parts.append(tail)
        return "\n".join(parts)

    def on_progress_wanted(self, handle: RunHandle) -> Any:
        """Map updates to progress items from now on (see :mod:`._fold`)."""
        self.fold.emit = handle.emit

        def stop() -> None:
            self.fold.emit = None

        return stop

    # -- what the agent process routes to the run --------------------------------------

    def on_update(self, message: dict[str, Any]) -> None:
        """A notification: folded when it is an update of this run's session."""
        self.fold.feed(message)

    async def on_request(self, method: str, params: Any) -> Any:
        """A request of the agent about this run's session: permission by policy;
        ``fs/*`` and ``terminal/*`` by the shared workspace (``workspace = "shared"``)."""
        if method == "session/request_permission":
            return self._permission(params)
        if method in WORKSPACE_METHODS and self.config.workspace == "shared":
            return await self._shared().handle(method, params)
        raise RemoteError(-32601, f"Method not found: {method}")

    def _shared(self) -> SharedWorkspace:
        if self.workspace is None:
            self.workspace = SharedWorkspace(
                parent=self.request.parent,
                names=self.config.workspace_tools,
                signal=self.stop,
                prefix=self.handle.id if self.handle is not None else self.provider,
                read_only=self.policy.mode == "read-only",
                max_bytes=self.config.max_message_bytes,
                emit=lambda: self.fold.emit,
            )
        return self.workspace

    def _permission(self, params: Any) -> dict[str, Any]:
        options = params.get("options") if isinstance(params, dict) else None
        if not self.cancelled and isinstance(options, list):
            for kind in _PREFERENCE[self.config.permission]:
                for option in options:
                    if isinstance(option, dict) and option.get("kind") == kind:
                        self._count(kind)
                        return {"outcome": {"outcome": "selected", "optionId": option["optionId"]}}
        self._count("cancelled")
        return {"outcome": {"outcome": "cancelled"}}

    def _count(self, decision: str) -> None:
        self.decisions[decision] = self.decisions.get(decision, 0) + 1

    def _with_permissions(self, text: str) -> str:
        if not self.decisions:
            return text
        parts = [f"{count} answered {kind}" for kind, count in self.decisions.items()]
        policy = self.config.permission
        return f"{text}\npermission requests ({policy} policy): " + ", ".join(parts)


def _budget_stop(response: dict[str, Any]) -> str | None:
    """The diagnostic of a turn a dsh child stopped at its budget
    (``_meta.dsh.stopReason = "budget"``), else None."""
    meta = response.get("_meta")
    dsh = meta.get("dsh") if isinstance(meta, dict) else None
    if not isinstance(dsh, dict) or dsh.get("stopReason") != "budget":
        return None
    diagnostic = dsh.get("diagnostic")
    return str(diagnostic) if diagnostic else "the agent stopped at its budget"


def _usage_of(usage: Any) -> SubagentUsage:
    if not isinstance(usage, dict):
        return SubagentUsage.unknown()
    return SubagentUsage.from_json(
        {
            "input_tokens": usage.get("inputTokens"),
            "output_tokens": usage.get("outputTokens"),
            "cached_input_tokens": usage.get("cachedReadTokens"),
            "reasoning_tokens": usage.get("thoughtTokens"),
            **(
                usage.get("_meta", {}).get("dsh", {})
                if isinstance(usage.get("_meta"), dict)
                else {}
            ),
        }
    )


def _died(error: Exception) -> bool:
    """The warm process died before it could serve (its link exited or closed)."""
    return isinstance(error, LinkError) and error.kind in ("exited", "closed")
