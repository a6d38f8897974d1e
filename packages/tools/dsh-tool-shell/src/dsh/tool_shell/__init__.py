"""dsh.tool_shell — a shell tool whose processes never outlive the call.

The plugin ``dsh-tool-shell`` registers ``shell`` (permission ``ask``, kind
``execute``, not concurrency-safe): ``/bin/sh -c <command>`` in the calling agent's
working directory, with a timeout, a credential-scrubbed environment, stdout and
stderr captured together up to a byte cap, and the exit status in the result. The
command runs in a process group of its own with a run tag (dsh.subprocess): on
timeout, on cancel and when it returns, the whole tree is killed, grandchildren
that left the group included; if dsh itself dies, the watchdog kills it.

The tool also offers a :class:`~dsh.subprocess.TerminalOpener` in its ``extensions``
(key :data:`~dsh.subprocess.TERMINAL_EXTENSION`): the same command, shell,
environment and sandbox, started in the background as a
:class:`~dsh.subprocess.Terminal` (what the ``acp`` provider's shared workspace
serves ``terminal/*`` with, finding the tool through the registry).

* :class:`ShellConfig` — the plugin's config.
* :func:`shell_tool` — the :class:`~dsh.core.Tool` for a config, to register
  without the plugin.
"""

from dsh.tool_shell._config import ShellConfig
from dsh.tool_shell._plugin import plugin
from dsh.tool_shell._tool import shell_tool

__all__ = ["ShellConfig", "plugin", "shell_tool"]
