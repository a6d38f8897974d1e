"""The agent card ``dsh a2a`` serves, built from the preset's context."""

from __future__ import annotations

from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentExtension,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from a2a.utils.constants import PROTOCOL_VERSION_CURRENT, TransportProtocol

from dsh.a2a._protocol import LINEAGE_EXTENSION_URI
from dsh.core import Context

__all__ = ["LEGACY_PROTOCOL_VERSION", "REST_PATH", "build_agent_card", "describe_persona"]

REST_PATH = "/rest"
"""Where the HTTP+JSON (REST) binding is served, below the server's URL."""

LEGACY_PROTOCOL_VERSION = "0.3.0"
"""The A2A version of the card's second pair of interfaces (the same URLs): an A2A 0.3
client reads them as the card's ``url`` / ``preferredTransport`` / ``protocolVersion``
and ``additionalInterfaces``, and the server answers its 0.3 methods (``message/send``,
``message/stream``, ``tasks/get``, ``tasks/cancel``, ``tasks/resubscribe``)."""

_TEXT = ["text/plain"]
_DESCRIPTION_LIMIT = 300


def describe_persona(persona: str) -> str:
    """A one-paragraph description from a persona (its first paragraph, shortened)."""
    first = persona.strip().split("\n\n", 1)[0].replace("\n", " ").strip()
    if len(first) > _DESCRIPTION_LIMIT:
        first = first[: _DESCRIPTION_LIMIT - 1].rstrip() + "…"
    return first or "A dsh agent."


def build_agent_card(
    ctx: Context,
    *,
    url: str,
    name: str,
    description: str | None = None,
    version: str = "0",
    bearer: bool = False,
) -> AgentCard:
    """The card of the agent ``ctx`` serves at ``url``: JSON-RPC there, HTTP+JSON (REST)
    at ``<url>rest`` (:data:`REST_PATH`), each in A2A 1.0 and in A2A 0.3
    (:data:`LEGACY_PROTOCOL_VERSION`: the card also carries the 0.3 fields).

    Skills: one general skill (``task``), then one per tool of the context (id
    ``tool:<name>``, the tool's description, tagged with its kind). Capabilities:
    streaming, no push notifications, and dsh's extension (:data:`LINEAGE_EXTENSION_URI`:
    depth limit honoured, progress in metadata). ``bearer``: every request needs
    ``Authorization: Bearer <token>`` (declared as the ``bearer`` security scheme).
    """
    skills = [
        AgentSkill(
            id="task",
            name="task",
            description="Carry out a task described in plain text and answer with the result.",
            tags=["dsh", "agent"],
            input_modes=_TEXT,
            output_modes=_TEXT,
        )
    ]
    for tool_name in ctx.tools.names():
        tool = ctx.tools.get(tool_name)
        if tool is None:
            continue
        skills.append(
            AgentSkill(
                id=f"tool:{tool.name}",
                name=tool.name,
                description=tool.description or tool.name,
                tags=["tool", tool.kind],
            )
        )
    extension = AgentExtension(
        uri=LINEAGE_EXTENSION_URI,
        description="dsh lineage and progress: honours metadata.dsh.depth/maxDepth (and"
        " metadata.dsh.budget), reports progress items in metadata.dsh.progress and usage"
        " in metadata.dsh.usage",
        required=False,
    )
    extension.params.update({"depthLimit": True, "progress": True})
    if ctx.has_service("subagents"):  # the subagent runtime enforces a budget
        extension.params.update({"budget": True})
    card = AgentCard(
        name=name,
        description=description or describe_persona(ctx.defaults.persona),
        version=version,
        supported_interfaces=[
            AgentInterface(url=where, protocol_binding=binding, protocol_version=version)
            for version in (PROTOCOL_VERSION_CURRENT, LEGACY_PROTOCOL_VERSION)
            for where, binding in (
                (url, TransportProtocol.JSONRPC.value),
                (url.rstrip("/") + REST_PATH, TransportProtocol.HTTP_JSON.value),
            )
        ],
        capabilities=AgentCapabilities(
            streaming=True, push_notifications=False, extensions=[extension]
        ),
        default_input_modes=_TEXT,
        default_output_modes=_TEXT,
        skills=skills,
    )
    if bearer:
        card.security_schemes["bearer"].CopyFrom(
            SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(
                    scheme="bearer", description="the token named by dsh a2a --token-env"
                )
            )
        )
        card.security_requirements.append(SecurityRequirement(schemes={"bearer": StringList()}))
    return card
