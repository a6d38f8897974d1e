"""Answers to codex's server requests: every one is answered, none is left hanging.

An unattended child has nobody to ask, so the policy answers for the user:
approval requests are accepted only when the permission mode allows it, and
declined otherwise (the turn goes on and the model is told); questions for the
user get no answers; MCP elicitations are declined; dynamic tool calls fail (this
provider registers no dynamic tools). Anything else is *unknown*: it is answered
with a JSON-RPC error and the run fails with a diagnostic naming the method.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dsh.subagent_codex._rpc import METHOD_NOT_FOUND, ServerRequestAnswer

__all__ = ["KNOWN_METHODS", "PolicyDecision", "decide"]

NO_USER = "this unattended subagent cannot ask a user"


@dataclass(frozen=True, slots=True)
class PolicyDecision:
    """The answer to send, and whether the run must fail because of the request."""

    answer: ServerRequestAnswer
    fatal: str | None = None
    """A diagnostic when the request is unknown (the run then fails)."""
    approved: bool | None = None
    """For approval requests: accepted (True) or declined (False)."""


def _approval(approve: bool, params: Mapping[str, Any]) -> Any:
    return {"decision": "accept" if approve else "decline"}


def _permissions(approve: bool, params: Mapping[str, Any]) -> Any:
    requested = params.get("permissions")
    granted = dict(requested) if approve and isinstance(requested, Mapping) else {}
    return {"permissions": granted, "scope": "turn"}


def _legacy_review(approve: bool, params: Mapping[str, Any]) -> Any:
    if approve:
        return {"decision": "approved"}
    return {"decision": {"denied": {"rejection": f"declined: {NO_USER}"}}}


def _user_input(approve: bool, params: Mapping[str, Any]) -> Any:
    return {"answers": {}}


def _elicitation(approve: bool, params: Mapping[str, Any]) -> Any:
    return {"action": "decline", "content": None, "_meta": None}


def _dynamic_tool(approve: bool, params: Mapping[str, Any]) -> Any:
    tool = params.get("tool")
    text = f"dsh registers no dynamic tools; {tool!r} is not available"
    return {"contentItems": [{"type": "inputText", "text": text}], "success": False}


_ANSWERS = {
    "item/commandExecution/requestApproval": _approval,
    "item/fileChange/requestApproval": _approval,
    "item/permissions/requestApproval": _permissions,
    "execCommandApproval": _legacy_review,
    "applyPatchApproval": _legacy_review,
    "item/tool/requestUserInput": _user_input,
    "mcpServer/elicitation/request": _elicitation,
    "item/tool/call": _dynamic_tool,
}

_APPROVALS = frozenset(
    {
        "item/commandExecution/requestApproval",
        "item/fileChange/requestApproval",
        "item/permissions/requestApproval",
        "execCommandApproval",
        "applyPatchApproval",
    }
)

KNOWN_METHODS: frozenset[str] = frozenset(_ANSWERS)
"""Server request methods the policy answers (the rest fail the run)."""


def decide(method: str, params: Mapping[str, Any], *, approve: bool) -> PolicyDecision:
    """The answer to server request ``method`` under a mode that does (not) ``approve``."""
    answer = _ANSWERS.get(method)
    if answer is None:
        message = f"dsh codex provider does not handle server request {method!r}"
        return PolicyDecision(
            ServerRequestAnswer(error=(METHOD_NOT_FOUND, message)),
            fatal=(
                f"codex sent a server request this provider cannot answer: {method!r}"
                " (answered with an error; the run was stopped)"
            ),
        )
    approval = method in _APPROVALS
    return PolicyDecision(
        ServerRequestAnswer(result=answer(approve, params)),
        approved=approve if approval else None,
    )
