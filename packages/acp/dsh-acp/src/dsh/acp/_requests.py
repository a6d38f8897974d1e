"""What ``dsh acp`` answers: stop reasons, errors, prompt blocks, the lineage a dsh
client sends."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from acp import RequestError
from acp.schema import (
    EmbeddedResourceContentBlock,
    PromptResponse,
    ResourceContentBlock,
    StopReason,
    TextContentBlock,
    TextResourceContents,
    Usage,
)

from dsh.acp._agent_base import PromptBlock
from dsh.core import TurnOutcome
from dsh.core.models import NoModelError
from dsh.core.sessions import Event
from dsh.subagent.kit import Lineage, RelayWatch, turn_usage

__all__ = [
    "EDITOR_NO_MODEL_HELP",
    "NOT_CONFIGURED",
    "STOP_REASONS",
    "TURN_FAILED",
    "answer",
    "check_cwd",
    "lineage",
    "not_configured",
    "to_dsh_blocks",
]

STOP_REASONS: dict[str, StopReason] = {
    "completed": "end_turn",
    "max-tokens": "max_tokens",
    "refusal": "refusal",
    "aborted": "cancelled",
}
"""dsh turn stop reason → ACP stop reason (``error`` and ``blocked`` answer with an error)."""

TURN_FAILED = -32603
"""The JSON-RPC code of a turn that ended ``error`` or ``blocked``."""
NOT_CONFIGURED = -32603
"""The JSON-RPC code of a session request when the preset is unusable."""

EDITOR_NO_MODEL_HELP = (
    "no model is configured. Give the agent server an `env` block in the editor's"
    ' settings (Zed: "agent_servers" -> "dsh" -> "env" in settings.json) with'
    " OPENAI_BASE_URL and OPENAI_API_KEY for any OpenAI-compatible server"
    " (OPENAI_MODEL for the model), or DEEPSEEK_API_KEY, or OPENAI_API_KEY, e.g."
    ' "env": { "DEEPSEEK_API_KEY": "sk-..." }; then restart the agent. Or add an'
    " [agent.model] table to the preset. See docs/zed.md."
)
"""``dsh acp``'s answer to ``session/new`` without a model: the fix is in the editor."""


def not_configured(exc: BaseException) -> RequestError:
    """The error of a session request when the context cannot make an agent."""
    message = str(exc) or type(exc).__name__
    if isinstance(exc, NoModelError):  # an editor's user fixes it in the editor's settings
        message = EDITOR_NO_MODEL_HELP
    return RequestError(
        NOT_CONFIGURED, f"dsh acp cannot start a session: {message}", {"details": message}
    )


def lineage(kwargs: dict[str, Any]) -> Lineage | None:
    """The delegation depth and limit a dsh client sent in ``_meta.dsh`` (else this
    process's environment's)."""
    try:
        found = Lineage.from_meta({"dsh": kwargs.get("dsh")})
        return found if found is not None else Lineage.from_env(os.environ)
    except ValueError as exc:
        raise RequestError.invalid_params({"details": str(exc)}) from None


def check_cwd(cwd: str) -> None:
    """Refuse a ``cwd`` that is not an absolute path to a directory."""
    if not os.path.isabs(cwd):
        raise RequestError.invalid_params({"cwd": cwd, "details": "cwd must be an absolute path"})
    if not os.path.isdir(cwd):
        raise RequestError.invalid_params({"cwd": cwd, "details": "cwd is not a directory"})


def to_dsh_blocks(prompt: Sequence[PromptBlock]) -> list[dict[str, Any]]:
    """The prompt's ACP content blocks as dsh text blocks."""
    blocks: list[dict[str, Any]] = []
    for block in prompt:
        if isinstance(block, TextContentBlock):
            blocks.append({"type": "text", "text": block.text})
        elif isinstance(block, ResourceContentBlock):
            blocks.append({"type": "text", "text": f"[{block.name}]({block.uri})"})
        elif isinstance(block, EmbeddedResourceContentBlock):
            resource = block.resource
            if isinstance(resource, TextResourceContents):
                text = f'<resource uri="{resource.uri}">\n{resource.text}\n</resource>'
            else:
                text = f"[binary resource {resource.uri} omitted]"
            blocks.append({"type": "text", "text": text})
        else:
            raise RequestError.invalid_params(
                {"details": f"dsh acp does not accept {block.type} content (not advertised)"}
            )
    if not blocks:
        raise RequestError.invalid_params({"details": "the prompt is empty"})
    return blocks


def answer(
    events: Sequence[Event],
    start: int,
    relay: RelayWatch | None,
    verdict: tuple[str, str] | None = None,
) -> PromptResponse:
    """The ``session/prompt`` answer of the turn that began at ``events[start]``: its
    stop reason and its usage (with the relayed delegations'), or its error. A turn
    its budget stopped (``verdict``: the meter's) answers ``cancelled`` with
    ``_meta.dsh = {"stopReason": "budget", "diagnostic"}``; one whose budget could not
    be enforced fails."""
    outcome: TurnOutcome | None = None
    for index in range(start, len(events)):
        if events[index].type == "turn/end":
            outcome = TurnOutcome.of(events[index])
    if outcome is None:
        raise RequestError(TURN_FAILED, "dsh turn ended without a turn/end event")
    stop = STOP_REASONS.get(outcome.stop_reason)
    budget: dict[str, Any] | None = None
    if verdict is not None and outcome.stop_reason == "aborted":
        if verdict[0] == "budget":
            budget = {"stopReason": "budget", "diagnostic": verdict[1]}
        else:
            raise RequestError(
                TURN_FAILED,
                f"dsh turn error: the budget could not be enforced: {verdict[1]}",
                {"stopReason": "error", "error": verdict[1]},
            )
    if stop is None:
        detail = outcome.error or outcome.stop_reason
        raise RequestError(
            TURN_FAILED,
            f"dsh turn {outcome.stop_reason}: {detail}",
            {"stopReason": outcome.stop_reason, "error": outcome.error},
        )
    total = turn_usage(events, start)
    if relay is not None and relay.runs:
        total = total + relay.usage
    usage = Usage(
        input_tokens=total.input_tokens,
        output_tokens=total.output_tokens,
        total_tokens=total.total_tokens,
        cached_read_tokens=total.cached_input_tokens,
        thought_tokens=total.reasoning_tokens,
        field_meta={"dsh": total.to_json()},
    )
    return PromptResponse(
        stop_reason=stop, usage=usage, field_meta={"dsh": budget} if budget else None
    )
