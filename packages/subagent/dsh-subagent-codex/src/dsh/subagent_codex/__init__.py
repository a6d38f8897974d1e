"""dsh.subagent_codex — the ``codex`` subagent provider.

Each run is a one-shot ``codex app-server`` child spoken to over stdio
(newline-delimited JSON-RPC without a ``jsonrpc`` field): ``initialize``,
``initialized``, an ephemeral ``thread/start`` in the parent's cwd with the
sandbox and approval policy of ``permission_mode``, one ``turn/start`` with the
prompt; the last completed agent message is the output. Cancel sends
``turn/interrupt``, then the process group is torn down::

    [[plugin]]
    name = "dsh-subagent-codex"
    config = { permission_mode = "workspace-write", turn_timeout = 600 }

    [[plugin]]
    name = "dsh-tool-subagent"
    config = { provider = "codex", tool_name = "subagent_codex", max_depth = "provider-managed" }
"""

from dsh.subagent_codex.config import (
    PERMISSION_MODES,
    CodexConfig,
    PermissionMode,
    PermissionSettings,
)
from dsh.subagent_codex.plugin import plugin
from dsh.subagent_codex.policy import KNOWN_METHODS, PolicyDecision, decide
from dsh.subagent_codex.provider import CodexProvider
from dsh.subagent_codex.rpc import (
    AppServerConnection,
    ConnectionClosed,
    Notification,
    ProtocolError,
    Response,
    RpcError,
    ServerRequest,
    ServerRequestAnswer,
    classify,
)
from dsh.subagent_codex.session import CodexSession
from dsh.subagent_codex.turn import TurnTracker, usage_from

__all__ = [
    "KNOWN_METHODS",
    "PERMISSION_MODES",
    "AppServerConnection",
    "CodexConfig",
    "CodexProvider",
    "CodexSession",
    "ConnectionClosed",
    "Notification",
    "PermissionMode",
    "PermissionSettings",
    "PolicyDecision",
    "ProtocolError",
    "Response",
    "RpcError",
    "ServerRequest",
    "ServerRequestAnswer",
    "TurnTracker",
    "classify",
    "decide",
    "plugin",
    "usage_from",
]
