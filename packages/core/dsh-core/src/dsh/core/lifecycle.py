"""Process and registration lifecycle: disposers (what every registration returns),
the stop signals a long-running process handles, and the garbage collector's tuning.

:mod:`dsh.core` itself exports ``EffectScope`` (which collects disposers),
``AbortSignal`` and ``Aborted``.
"""

from dsh.core._effects import AsyncDisposer, Disposer
from dsh.core._gc import tune_gc
from dsh.core._stop_signals import STOP_SIGNALS, on_stop_signals

__all__ = [
    "STOP_SIGNALS",
    "AsyncDisposer",
    "Disposer",
    "on_stop_signals",
    "tune_gc",
]
