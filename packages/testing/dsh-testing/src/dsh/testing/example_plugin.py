"""A small real plugin, installed through the ``dsh.plugins`` entry point.

Tests load it from presets to prove the loader and effect scoping end to end:
it registers a tool, an LLM adapter, a context service and a bus listener, all
recorded in its effect scope.

With ``command_tool`` set it also registers a tool of that name that runs a
command (``argv``) as a process and waits for it: how a separate dsh process
(``dsh acp``) in a fault test gets a long-running tool process (``sleep 300``),
started in a session of its own as agent products do for their tool commands.
The process inherits this process's environment, so it carries the dsh run tag
of the tree it runs in; cancelling the tool kills it. ``command_permission``
governs it (``ask``: the agent's approver is asked first).
"""

from dsh.testing._example_plugin import ExampleConfig, ExampleService, plugin

__all__ = ["ExampleConfig", "ExampleService", "plugin"]
