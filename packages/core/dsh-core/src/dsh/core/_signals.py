"""Cancellation: one abort signal type that crosses the publication point of a run.

An :class:`AbortSignal` carries a reason and callbacks. It is cheap (slots, lazily
allocated callback list) because every tool call and every child run gets one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio

from dsh.core._effects import Disposer
from dsh.core._errors import DshError

__all__ = ["AbortSignal", "Aborted"]

_log = logging.getLogger("dsh.core._signals")


class Aborted(DshError):
    """Raised by :meth:`AbortSignal.raise_if_aborted` once the signal has fired."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _noop() -> None:
    return None


class AbortSignal:
    """A one-shot cancellation signal with a reason and callbacks.

    ``abort(reason)`` fires it once; later calls are ignored. Callbacks registered
    after it fired run immediately. A failing callback is logged and never stops
    the others.
    """

    __slots__ = ("_callbacks", "_event", "_reason")

    def __init__(self) -> None:
        self._reason: str | None = None
        self._callbacks: list[Callable[[str], None]] | None = None
        self._event: anyio.Event | None = None

    @property
    def aborted(self) -> bool:
        """True once :meth:`abort` has been called."""
        return self._reason is not None

    @property
    def reason(self) -> str | None:
        """The reason given to :meth:`abort`, or None while not aborted."""
        return self._reason

    def abort(self, reason: str = "aborted") -> None:
        """Fire the signal with ``reason`` (no effect if it already fired)."""
        if self._reason is not None:
            return
        self._reason = reason or "aborted"
        callbacks, self._callbacks = self._callbacks, None
        if self._event is not None:
            self._event.set()
        if callbacks:
            for callback in callbacks:
                _call(callback, self._reason)

    def on_abort(self, callback: Callable[[str], None]) -> Disposer:
        """Call ``callback(reason)`` when the signal fires; returns a disposer."""
        if self._reason is not None:
            _call(callback, self._reason)
            return _noop
        if self._callbacks is None:
            self._callbacks = []
        self._callbacks.append(callback)
        return _Unlink(self, callback)

    def raise_if_aborted(self) -> None:
        """Raise :class:`Aborted` if the signal has fired."""
        if self._reason is not None:
            raise Aborted(self._reason)

    async def wait(self) -> str:
        """Wait until the signal fires; returns the reason."""
        if self._reason is None:
            if self._event is None:
                self._event = anyio.Event()
            await self._event.wait()
        assert self._reason is not None
        return self._reason

    def linked(self) -> tuple[AbortSignal, Disposer]:
        """A new signal that fires when this one does, and the disposer of the link.

        The child can also be aborted on its own without affecting this signal.
        """
        child = AbortSignal()
        return child, self.on_abort(child.abort)

    def __repr__(self) -> str:
        state = f"aborted: {self._reason!r}" if self._reason is not None else "live"
        return f"<AbortSignal {state}>"


class _Unlink:
    """The disposer :meth:`AbortSignal.on_abort` returns (one small object, not a
    closure with its cells: every tool call and child run makes one)."""

    __slots__ = ("_callback", "_signal")

    def __init__(self, signal: AbortSignal, callback: Callable[[str], None]) -> None:
        self._signal = signal
        self._callback = callback

    def __call__(self) -> None:
        callbacks = self._signal._callbacks
        if callbacks is not None:
            try:  # noqa: SIM105 (contextlib.suppress costs three calls; this runs per tool call)
                callbacks.remove(self._callback)
            except ValueError:
                pass


def _call(callback: Callable[[str], None], reason: str) -> None:
    try:
        callback(reason)
    except Exception:
        _log.exception("abort callback %r failed", callback)
