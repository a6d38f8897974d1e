"""The event bus: typed-by-name events, optionally scoped to one agent.

Listeners are plain callables. A listener that raises is logged and never affects
the emitter or the other listeners.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dsh.core._effects import Disposer

__all__ = ["ANY", "BusEvent", "EventBus", "Listener"]

_log = logging.getLogger("dsh.core._events")

ANY = "*"
"""Subscribe to every event type."""


@dataclass(frozen=True, slots=True)
class BusEvent:
    """One emitted event: its ``type``, its ``data`` and the agent id it is scoped to."""

    type: str
    data: Mapping[str, Any]
    scope: str | None = None


Listener = Callable[[BusEvent], None]


class EventBus:
    """Publish/subscribe by event type, with an optional scope filter per listener."""

    __slots__ = ("_listeners",)

    def __init__(self) -> None:
        self._listeners: dict[str, list[tuple[Listener, str | None]]] = {}

    def on(self, type: str, listener: Listener, *, scope: str | None = None) -> Disposer:
        """Call ``listener`` for each event of ``type`` (``"*"`` for all).

        With ``scope`` set, only events emitted with that scope reach it.
        Returns a disposer that unsubscribes.
        """
        entry = (listener, scope)
        self._listeners.setdefault(type, []).append(entry)

        def off() -> None:
            entries = self._listeners.get(type)
            if entries is not None and entry in entries:
                entries.remove(entry)
                if not entries:
                    del self._listeners[type]

        return off

    def has_listeners(self, type: str) -> bool:
        """True if emitting ``type`` would reach at least one listener."""
        return type in self._listeners or ANY in self._listeners

    def emit(self, type: str, data: Mapping[str, Any], *, scope: str | None = None) -> None:
        """Deliver an event to its listeners; listener failures are logged only."""
        listeners = self._listeners
        if type not in listeners and ANY not in listeners:
            return
        event = BusEvent(type, data, scope)
        for key in (type, ANY):
            entries = listeners.get(key)
            if not entries:
                continue
            for listener, wanted in tuple(entries):
                if wanted is not None and wanted != scope:
                    continue
                try:
                    listener(event)
                except Exception:
                    _log.exception("listener %r for %r failed", listener, type)
