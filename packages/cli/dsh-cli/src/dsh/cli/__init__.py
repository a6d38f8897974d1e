"""dsh.cli — the ``dsh`` command.

``dsh run [--preset FILE|NAME] "task"`` runs an agent from a preset, shows its
delegations live and prints the answer and the usage; ``dsh demo`` runs the offline
delegation demo; ``dsh acp`` serves an agent over the Agent Client Protocol on stdio;
``dsh init`` writes a ``dsh.toml``; ``dsh presets [show NAME]`` lists or prints the named
presets. Other packages add subcommands through the ``dsh.commands`` entry points.
"""

from dsh.cli._main import main

__all__ = ["main"]
