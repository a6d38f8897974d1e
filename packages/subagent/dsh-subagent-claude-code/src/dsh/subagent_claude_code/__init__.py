"""dsh.subagent_claude_code — the ``claude-code`` subagent provider.

Each delegation runs one Claude Code CLI process (bundled in claude-agent-sdk)
through ``claude_agent_sdk.query``, in the parent's cwd, with a credential-
scrubbed environment, a permission mode (default ``dontAsk``) and a permission
callback that denies whatever the CLI would ask about. ``run.progress()`` shows
its text, thinking, tool calls and usage as they happen. Load it from a preset::

    [[plugin]]
    name = "dsh-subagent-claude-code"
    config = { env = { ANTHROPIC_BASE_URL = "..." }, passthrough_env = ["ANTHROPIC_API_KEY"] }

    [[plugin]]
    id = "tool-subagent-claude"
    name = "dsh-tool-subagent"
    config = { provider = "claude-code", tool_name = "subagent_claude",
               max_depth = "provider-managed" }

Importing this package does not import claude-agent-sdk (about 3 s); the first
run does, in a worker thread.
"""

from dsh.subagent_claude_code._config import ClaudeCodeConfig, PermissionMode
from dsh.subagent_claude_code._plugin import plugin
from dsh.subagent_claude_code._provider import ClaudeCodeProvider

__all__ = ["ClaudeCodeConfig", "ClaudeCodeProvider", "PermissionMode", "plugin"]
