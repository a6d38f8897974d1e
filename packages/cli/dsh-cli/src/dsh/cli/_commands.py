"""Subcommands from other packages: the ``dsh.commands`` entry-point group.

A package adds ``dsh NAME`` by declaring an entry point named ``NAME`` whose object
has ``help: str``, ``add_arguments(parser)`` and ``run(args) -> int``
(:class:`dsh.core.argtypes.Command`)::

    [project.entry-points."dsh.commands"]
    acp = "dsh.acp._command:command"

Entry points are imported only when needed: the one named on the command line, or
all of them for ``dsh --help``. One that fails to import, lacks a member or clashes
with a built-in command is left out (``dsh --help`` says so) and never breaks the
other commands.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # (not imported at start: dsh.core loads only when it is needed)
    from dsh.core.argtypes import Command

__all__ = ["ENTRY_POINT_GROUP", "LoadedCommand", "discover", "load"]

ENTRY_POINT_GROUP = "dsh.commands"


@dataclass(frozen=True, slots=True)
class LoadedCommand:
    """An entry point, loaded: the command, or why it could not be used."""

    name: str
    source: str
    command: Command | None
    problem: str | None = None


def discover(reserved: set[str]) -> dict[str, EntryPoint]:
    """The ``dsh.commands`` entry points not named like a built-in command (first wins)."""
    found: dict[str, EntryPoint] = {}
    try:
        points = list(entry_points(group=ENTRY_POINT_GROUP))
    except Exception:
        return found
    for point in points:
        if point.name in reserved or point.name in found:
            continue
        found[point.name] = point
    return found


def load(point: EntryPoint) -> LoadedCommand:
    """Import one entry point; never raises."""
    try:
        obj: Any = point.load()
    except Exception as exc:
        return LoadedCommand(
            point.name, point.value, None, f"failed to import: {type(exc).__name__}: {exc}"
        )
    missing = [
        member
        for member in ("help", "add_arguments", "run")
        if not hasattr(obj, member) or (member != "help" and not callable(getattr(obj, member)))
    ]
    if missing:
        return LoadedCommand(
            point.name,
            point.value,
            None,
            f"{point.value} is not a dsh command (missing {', '.join(missing)})",
        )
    return LoadedCommand(point.name, point.value, obj)
