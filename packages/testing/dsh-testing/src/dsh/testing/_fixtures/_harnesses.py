"""The conformance harness of a provider whose child runs on the keyed model."""

from __future__ import annotations

from typing import Any

from dsh.core import Agent, Context
from dsh.testing.conformance import ConformanceHarness

__all__ = ["keyed_conformance"]


def keyed_conformance(
    ctx: Context, provider: str, parent: Agent, **overrides: Any
) -> ConformanceHarness:
    """The conformance harness of ``provider`` whose child runs on
    :data:`~dsh.testing.fixtures.KEYED_PRESET` (a ``dsh acp``, ``dsh a2a`` or worker
    process): "say hello" completes with ``Done: say hello``, "please hang" hangs until
    cancelled, "please fail" fails; a cancel settles within 5 s. ``overrides``: other
    :class:`~dsh.testing.conformance.ConformanceHarness` fields."""
    fields: dict[str, Any] = {
        "complete_prompt": "say hello",
        "expected_output": "Done: say hello",
        "hang_prompt": "please hang",
        "fail_prompt": "please fail",
        "cancel_bound": 5.0,
        "start_signal_grace": 0.3,
        **overrides,
    }
    return ConformanceHarness(ctx, provider, parent, **fields)
