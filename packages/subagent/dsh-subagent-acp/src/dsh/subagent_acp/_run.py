"""One ``acp`` run on the provider kit: spawn, ``initialize``, ``session/new``,
``session/prompt``, ``session/cancel``; the kit does the rest."""

from __future__ import annotations

from typing import Any

from dsh.subagent import (
    RunHandle,
    StartFailed,
    SubagentResult,
    SubagentStartRequest,
    SubagentUsage,
)
from dsh.subagent_acp._config import AcpProviderConfig
from dsh.subagent_acp._connection import AcpConnection, LinkError, RemoteError
from dsh.subagent_acp._fold import SessionFold
from dsh.subprocess import SubprocessRun

__all__ = ["PROTOCOL_VERSION", "STOP_REASONS", "AcpRun"]

PROTOCOL_VERSION = 1

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
_VERSION = "0.1.0"


class AcpRun(SubprocessRun):
    """The state of one run: its process, its connection, its session."""

    config: AcpProviderConfig

    def __init__(
        self, provider: str, request: SubagentStartRequest, config: AcpProviderConfig
    ) -> None:
        super().__init__(provider, request, config)
        self.fold = SessionFold()
        self.conn: AcpConnection | None = None
        self.session_id: str | None = None
        self.decisions: dict[str, int] = {}
        """How many permission requests got each answer (option kind or ``cancelled``)."""
        self.cancelled = False
        self._reported_usage = SubagentUsage.unknown()

    # -- the hooks --------------------------------------------------------------------

    async def open(self) -> None:
        """Spawn the agent, ``initialize``, ``session/new``."""
        child = await self.spawn(what=f"{self.provider} agent")
        self.conn = AcpConnection(
            child,
            max_line_bytes=self.config.max_message_bytes,
            skip_garbage=self.config.stdout_garbage == "skip",
            on_notification=self.fold.feed,
            on_request=self._on_request,
        )
        self.stages.enter("initialize")
        init = await self.conn.request("initialize", self._initialize_params())
        self._check_initialize(init)
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

    async def turn(self) -> SubagentResult:
        """``session/prompt`` with the prompt's text blocks; map the stop reason."""
        assert self.conn is not None
        self.stages.enter("session/prompt")
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
        stop = STOP_REASONS.get(acp_reason, "error")
        diagnostic: str | None = None
        if stop == "aborted":
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
        """Stop reading, then tear the process tree down."""
        if self.conn is not None:
            await self.conn.close()
        await super().close()

    def partial_output(self) -> str:
        """The text of the last agent message so far."""
        return self.fold.output()

    def usage(self) -> SubagentUsage:
        """The usage the agent reported with its answer (unknown until then)."""
        return self._reported_usage

    def describe(self, error: BaseException) -> str:
        """The stage and the link's own words, plus the permission answers given."""
        if isinstance(error, LinkError):
            text = f"{self.provider} {self.stages.current} failed: {error.message}"
        else:
            text = super().describe(error)
        return self._with_permissions(text)

    def details(self) -> str:
        """Notices the agent sent, then its stderr tail."""
        parts = []
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

    # -- protocol details --------------------------------------------------------------

    def _initialize_params(self) -> dict[str, Any]:
        return {
            "protocolVersion": PROTOCOL_VERSION,
            "clientCapabilities": {
                "fs": {"readTextFile": False, "writeTextFile": False},
                "terminal": False,
                "session": {"notices": {}},
            },
            "clientInfo": {"name": "dsh-subagent-acp", "version": _VERSION},
            "_meta": {"dsh": self.lineage.meta()},
        }

    def _check_initialize(self, init: Any) -> None:
        if not isinstance(init, dict):
            raise LinkError(f"the agent answered initialize with {str(init)[:200]}", "protocol")
        version = init.get("protocolVersion")
        if version != PROTOCOL_VERSION:
            raise LinkError(
                f"the agent speaks ACP protocol version {version};"
                f" dsh-subagent-acp speaks version {PROTOCOL_VERSION}",
                "protocol",
            )
        if self.config.depth_limit and not _confirms_depth_limit(init):
            raise StartFailed(
                f"{self.provider} initialize failed: the provider is configured with"
                " depth_limit = true but the agent does not confirm that it honours dsh's"
                " depth limit (agentCapabilities._meta.dsh.depthLimit); use an agent that"
                " does (dsh acp) or set depth_limit = false"
            )

    async def _on_request(self, method: str, params: Any) -> Any:
        if method == "session/request_permission":
            return self._permission(params)
        raise RemoteError(-32601, f"Method not found: {method}")

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


def _confirms_depth_limit(init: dict[str, Any]) -> bool:
    capabilities = init.get("agentCapabilities")
    meta = capabilities.get("_meta") if isinstance(capabilities, dict) else None
    dsh = meta.get("dsh") if isinstance(meta, dict) else None
    return isinstance(dsh, dict) and dsh.get("depthLimit") is True


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
