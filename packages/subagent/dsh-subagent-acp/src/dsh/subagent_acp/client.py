"""The ACP client side the agent talks back to: permission answers, nothing else.

Every method of ``acp.Client`` is overridden. A subclass that left one out would
inherit the Protocol's stub, which answers ``null`` instead of "method not
found", and the agent would take that for a successful file read. We advertise
no file-system or terminal capability, so those requests are refused with
``-32601``.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from acp import Client, RequestError
from acp.schema import (
    AgentMessageChunk,
    AgentPlanContentUpdate,
    AgentPlanRemovedUpdate,
    AgentPlanUpdate,
    AgentThoughtChunk,
    AllowedOutcome,
    AvailableCommandsUpdate,
    ConfigOptionUpdate,
    CreateElicitationResponse,
    CreateTerminalResponse,
    CurrentModeUpdate,
    DeniedOutcome,
    ElicitationMode,
    EnvVariable,
    KillTerminalResponse,
    PermissionOption,
    ReadTextFileResponse,
    ReleaseTerminalResponse,
    RequestPermissionResponse,
    SessionInfoUpdate,
    TerminalOutputResponse,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
    UsageUpdate,
    UserMessageChunk,
    WaitForTerminalExitResponse,
    WriteTextFileResponse,
)

__all__ = ["AcpClient", "PermissionPolicy"]

_log = logging.getLogger("dsh.subagent_acp.client")

PermissionPolicy = Literal["reject", "allow"]

_PREFERENCE: dict[str, tuple[str, ...]] = {
    "allow": ("allow_once", "allow_always"),
    "reject": ("reject_once", "reject_always"),
}

SessionUpdate = (
    UserMessageChunk
    | AgentMessageChunk
    | AgentThoughtChunk
    | ToolCallStart
    | ToolCallProgress
    | AgentPlanUpdate
    | AgentPlanContentUpdate
    | AgentPlanRemovedUpdate
    | AvailableCommandsUpdate
    | CurrentModeUpdate
    | ConfigOptionUpdate
    | SessionInfoUpdate
    | UsageUpdate
)


class AcpClient(Client):
    """Answers an agent's permission requests by policy; refuses fs/terminal.

    After :meth:`cancel_pending` (the run was cancelled) every permission request
    is answered ``cancelled``, as the ACP spec asks of a client that cancelled.
    """

    def __init__(self, policy: PermissionPolicy) -> None:
        self.policy: PermissionPolicy = policy
        self.cancelled = False
        self.decisions: dict[str, int] = {}
        """How many permission requests got each answer (option kind or ``cancelled``)."""

    # -- the agent's requests ---------------------------------------------------------

    async def request_permission(
        self,
        session_id: str,
        tool_call: ToolCallUpdate,
        options: list[PermissionOption],
        **kwargs: Any,
    ) -> RequestPermissionResponse:
        """Select the policy's option (allow-once / reject-once first), else cancel."""
        if not self.cancelled:
            for kind in _PREFERENCE[self.policy]:
                for option in options:
                    if option.kind == kind:
                        self._count(kind)
                        return RequestPermissionResponse(
                            outcome=AllowedOutcome(outcome="selected", option_id=option.option_id)
                        )
        self._count("cancelled")
        return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))

    def cancel_pending(self) -> None:
        """The run was cancelled: answer every later permission request ``cancelled``.

        Requests are answered as they arrive, so none is ever left open.
        """
        self.cancelled = True

    def _count(self, decision: str) -> None:
        self.decisions[decision] = self.decisions.get(decision, 0) + 1

    def describe_decisions(self) -> str | None:
        """``permission requests: 2 answered reject_once`` (None if there were none)."""
        if not self.decisions:
            return None
        parts = [f"{count} answered {kind}" for kind, count in self.decisions.items()]
        return f"permission requests ({self.policy} policy): " + ", ".join(parts)

    async def session_update(self, session_id: str, update: SessionUpdate, **kwargs: Any) -> None:
        """Updates are folded by the connection observer (wire order); nothing to do here."""
        return None

    # -- refused: no fs, terminal or elicitation capability was advertised ------------

    async def write_text_file(
        self, session_id: str, path: str, content: str, **kwargs: Any
    ) -> WriteTextFileResponse | None:
        """Refused: no ``fs.writeTextFile`` capability."""
        raise RequestError.method_not_found("fs/write_text_file")

    async def read_text_file(
        self,
        session_id: str,
        path: str,
        line: int | None = None,
        limit: int | None = None,
        **kwargs: Any,
    ) -> ReadTextFileResponse:
        """Refused: no ``fs.readTextFile`` capability."""
        raise RequestError.method_not_found("fs/read_text_file")

    async def create_terminal(
        self,
        session_id: str,
        command: str,
        args: list[str] | None = None,
        env: list[EnvVariable] | None = None,
        cwd: str | None = None,
        output_byte_limit: int | None = None,
        **kwargs: Any,
    ) -> CreateTerminalResponse:
        """Refused: no ``terminal`` capability."""
        raise RequestError.method_not_found("terminal/create")

    async def terminal_output(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> TerminalOutputResponse:
        """Refused: no ``terminal`` capability."""
        raise RequestError.method_not_found("terminal/output")

    async def release_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> ReleaseTerminalResponse | None:
        """Refused: no ``terminal`` capability."""
        raise RequestError.method_not_found("terminal/release")

    async def wait_for_terminal_exit(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> WaitForTerminalExitResponse:
        """Refused: no ``terminal`` capability."""
        raise RequestError.method_not_found("terminal/wait_for_exit")

    async def kill_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> KillTerminalResponse | None:
        """Refused: no ``terminal`` capability."""
        raise RequestError.method_not_found("terminal/kill")

    async def create_elicitation(
        self, message: str, mode: ElicitationMode, **kwargs: Any
    ) -> CreateElicitationResponse:
        """Refused: an unattended subagent cannot ask anyone."""
        raise RequestError.method_not_found("elicitation/create")

    async def complete_elicitation(self, elicitation_id: str, **kwargs: Any) -> None:
        """Ignored (notification): no elicitation was ever accepted."""
        return None

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Refused: no extension methods."""
        raise RequestError.method_not_found(f"_{method}")

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        """Ignored: no extension notifications."""
        _log.debug("ignoring extension notification _%s", method)

    def on_connect(self, conn: Any) -> None:
        """Nothing to keep: the provider holds the connection."""
        return None
