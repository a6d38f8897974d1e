"""Effect-scoped registrations: everything a plugin registers can be undone.

Registration functions across dsh return a :data:`Disposer`. An
:class:`EffectScope` collects them and undoes them in reverse order.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable

__all__ = ["AsyncDisposer", "Disposer", "EffectScope"]

_log = logging.getLogger("dsh.core._effects")

Disposer = Callable[[], None]
"""Undo one registration. Calling it twice is harmless."""

AsyncDisposer = Callable[[], Awaitable[None]]
"""Undo one registration that needs to wait (draining children, closing files)."""


class EffectScope:
    """Collects disposers and runs them in reverse order on :meth:`aclose`.

    A disposer that fails is logged; the rest still run, and the first failure is
    re-raised at the end so it is never lost.
    """

    __slots__ = ("_checks", "_closed", "_disposers", "label")

    def __init__(self, label: str = "") -> None:
        self.label = label
        self._disposers: list[Disposer | AsyncDisposer] = []
        self._checks: list[Callable[[], None]] = []
        self._closed = False

    @property
    def closed(self) -> bool:
        """True once :meth:`aclose` has run."""
        return self._closed

    def add(self, disposer: Disposer | AsyncDisposer) -> None:
        """Record ``disposer`` to run when the scope closes."""
        if self._closed:
            raise RuntimeError(f"effect scope {self.label!r} is already closed")
        self._disposers.append(disposer)

    def after_load(self, check: Callable[[], None]) -> None:
        """Run ``check()`` once every row of the preset being loaded has been applied
        (right after this plugin, when it is loaded on its own). A check that raises
        fails the whole load, with the row named: how a plugin says "this row needs
        that other row" whatever order the rows are in."""
        self._checks.append(check)

    def run_checks(self) -> None:
        """Run (and forget) the checks added with :meth:`after_load`."""
        checks, self._checks = self._checks, []
        for check in checks:
            check()

    def __len__(self) -> int:
        return len(self._disposers)

    async def aclose(self) -> None:
        """Run every disposer, newest first. Idempotent."""
        if self._closed:
            return
        self._closed = True
        first_error: BaseException | None = None
        while self._disposers:
            disposer = self._disposers.pop()
            try:
                outcome = disposer()
                if inspect.isawaitable(outcome):
                    await outcome
            except Exception as exc:
                _log.exception("disposer %r in scope %r failed", disposer, self.label)
                if first_error is None:
                    first_error = exc
        if first_error is not None:
            raise first_error
