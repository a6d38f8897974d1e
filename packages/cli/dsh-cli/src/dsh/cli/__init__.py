"""dsh.cli — the ``dsh`` command.

``dsh run [--preset FILE] "task"`` runs an agent from a preset and prints its
output; ``dsh demo`` runs the offline delegation demo; ``dsh acp`` serves an agent
over the Agent Client Protocol on stdio; ``dsh presets`` lists shipped presets.
"""

from dsh.cli._main import main

__all__ = ["main"]
