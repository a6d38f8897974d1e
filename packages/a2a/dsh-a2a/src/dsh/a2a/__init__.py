"""dsh.a2a — serve a dsh agent over the Agent2Agent (A2A) protocol: ``dsh a2a``.

``dsh a2a --preset agent.toml`` (or ``python -m dsh.a2a ...``) serves the preset's
agent with the A2A SDK's server application under uvicorn: an agent card built from
the preset (name, description, a skill per tool) at
``/.well-known/agent-card.json``, JSON-RPC at ``/`` with streaming (SSE), cancel and
task lookup. Each A2A task runs one turn of a dsh agent; a ``contextId`` continues the
conversation. Progress (text, tool calls, nested delegations with their path) goes
out as status and artifact updates, usage in the final task metadata (see
:mod:`dsh.a2a._protocol`). Binds 127.0.0.1 unless ``--token-env`` names a bearer
token; ``--task-store`` (memory, SQLite, PostgreSQL) lets several instances share tasks.

For embedding the server in an application of your own: :class:`DshAgentExecutor`
(the SDK's ``AgentExecutor`` for a dsh context) and :func:`build_agent_card`.
"""

from typing import TYPE_CHECKING, Any

from dsh.a2a._command import command
from dsh.a2a._protocol import LINEAGE_EXTENSION_URI

if TYPE_CHECKING:
    from dsh.a2a._card import build_agent_card
    from dsh.a2a._executor import DshAgentExecutor

__all__ = ["LINEAGE_EXTENSION_URI", "DshAgentExecutor", "build_agent_card", "command"]


def __getattr__(name: str) -> Any:
    # the server side imports the A2A SDK: only when asked for (``dsh --help`` imports
    # this package for the command)
    if name == "DshAgentExecutor":
        from dsh.a2a._executor import DshAgentExecutor

        return DshAgentExecutor
    if name == "build_agent_card":
        from dsh.a2a._card import build_agent_card

        return build_agent_card
    raise AttributeError(f"module 'dsh.a2a' has no attribute {name!r}")
