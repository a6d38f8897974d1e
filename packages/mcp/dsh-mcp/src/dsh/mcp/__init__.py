"""dsh.mcp — serve a preset's subagent tools over the Model Context Protocol: ``dsh mcp``.

``dsh mcp --preset delegate.toml`` (or ``python -m dsh.mcp ...``) serves, over stdio
(streamable HTTP with ``--http``), one MCP tool per ``dsh-tool-subagent`` row of the
preset: a call delegates the task to the row's provider through ``ctx.subagents``
(spawn, fork, codex, claude-code, acp, a2a...). Progress goes out as MCP progress
notifications when the client sends a progress token, ``notifications/cancelled``
cancels the run and its tree, and the result carries the usage in ``_meta.dsh``.
Other tools of the preset are served only when the ``dsh-mcp`` row lists them
(:class:`McpServeConfig`).
"""

from dsh.mcp._command import command
from dsh.mcp._config import McpServeConfig, plugin

__all__ = ["McpServeConfig", "command", "plugin"]
