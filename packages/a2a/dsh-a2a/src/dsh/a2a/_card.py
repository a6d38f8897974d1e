"""The agent card ``dsh a2a`` serves, built from the preset's context."""

from __future__ import annotations

from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentExtension,
    AgentInterface,
    AgentProvider,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from a2a.utils.constants import PROTOCOL_VERSION_CURRENT, TransportProtocol

from dsh.a2a._protocol import LINEAGE_EXTENSION_URI
from dsh.core import Context

__all__ = ["REST_PATH", "build_agent_card", "describe_persona"]

REST_PATH = "/rest"
"""Where the HTTP+JSON (REST) binding is served, below the server's URL."""

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
    at ``<url>rest`` (:data:`REST_PATH`).

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
        description="dsh lineage and progress: honours metadata.dsh.depth/maxDepth, reports"
        " progress items in metadata.dsh.progress and usage in metadata.dsh.usage",
        required=False,
    )
    extension.params.update({"depthLimit": True, "progress": True})
    card = AgentCard(
        name=name,
        description=description or describe_persona(ctx.defaults.persona),
        version=version,
        provider=AgentProvider(organization="dsh", url="https://dsh-dev.github.io/dsh/"),
        documentation_url="https://dsh-dev.github.io/dsh/serving-a2a/",
        supported_interfaces=[
            AgentInterface(
                url=url,
                protocol_binding=TransportProtocol.JSONRPC.value,
                protocol_version=PROTOCOL_VERSION_CURRENT,
            ),
            AgentInterface(
                url=url.rstrip("/") + REST_PATH,
                protocol_binding=TransportProtocol.HTTP_JSON.value,
                protocol_version=PROTOCOL_VERSION_CURRENT,
            ),
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
