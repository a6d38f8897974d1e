"""dsh.subagent_codex — the ``codex`` subagent provider.

Each run is a one-shot ``codex app-server`` child spoken to over stdio
(newline-delimited JSON-RPC without a ``jsonrpc`` field): ``initialize``,
``initialized``, an ephemeral ``thread/start`` in the parent's cwd with the
sandbox and approval policy of ``permission_mode``, one ``turn/start`` with the
prompt; the last completed agent message is the output, and ``run.progress()``
shows codex's text, reasoning, commands, file changes and token usage live.
Cancel sends ``turn/interrupt``, then the process group is torn down::

    [[plugin]]
    name = "dsh-subagent-codex"
    config = { permission_mode = "workspace-write", turn_timeout = 600 }

    [[plugin]]
    name = "dsh-tool-subagent"
    config = { provider = "codex", tool_name = "subagent_codex", max_depth = "provider-managed" }
"""

from dsh.subagent_codex._config import CodexConfig, CodexPoolConfig, PermissionMode
from dsh.subagent_codex._provider import CodexProvider, plugin

__all__ = ["CodexConfig", "CodexPoolConfig", "CodexProvider", "PermissionMode", "plugin"]
