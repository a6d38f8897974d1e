"""The garbage collector's schedule for a process that runs many agents at once.

dsh's hot path leaves no reference cycles behind (runs, handles, observers and
signals die by reference counting once a delegation is disposed), so the collector
finds no garbage from it. What it still does is *walk* the live objects: a full
collection visits every tracked object in the process, and with CPython's default
thresholds (700, 10, 10) one runs about every 70,000 net allocations of tracked
objects. With thousands of delegations in flight that means every delegation pays
for walking all the others, and the per-run cost grows with concurrency (3.4x at
10,000 concurrent children, measured).

:func:`tune_gc` (called once per process by :meth:`Context.open`) keeps the young
generations as they are (short-lived cyclic garbage is freed as promptly as before)
and lets a full collection run at most every 100 young-generation-1 collections
instead of every 10 (CPython's own rule that a full collection waits until the
objects promoted since the last one reach 25 % of the long-lived ones still
applies). It changes nothing when the application has set its own thresholds, and
``DSH_GC_TUNING=off`` turns it off.
"""

from __future__ import annotations

import gc
import os

__all__ = ["CPYTHON_DEFAULT_THRESHOLDS", "GC_TUNING_VARIABLE", "TUNED_THRESHOLDS", "tune_gc"]

CPYTHON_DEFAULT_THRESHOLDS = (700, 10, 10)
TUNED_THRESHOLDS = (700, 10, 100)
GC_TUNING_VARIABLE = "DSH_GC_TUNING"

_tuned = False


def tune_gc() -> bool:
    """Make full collections rarer (see the module doc), once per process; True if
    the thresholds were changed by this call."""
    global _tuned
    if _tuned:
        return False
    _tuned = True
    if os.environ.get(GC_TUNING_VARIABLE, "").strip().lower() in ("off", "0", "false", "no"):
        return False
    if gc.get_threshold() != CPYTHON_DEFAULT_THRESHOLDS:
        return False  # the application chose its own
    gc.set_threshold(*TUNED_THRESHOLDS)
    return True
