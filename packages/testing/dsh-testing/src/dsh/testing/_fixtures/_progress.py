"""A run's progress to its end, and what it shows of a delegation one level further down."""

from __future__ import annotations

from collections.abc import Sequence

import anyio

from dsh.subagent import SubagentProgress, SubagentResult, SubagentRun

__all__ = ["assert_one_grandchild", "progress_and_result", "progress_kinds"]


async def progress_and_result(
    run: SubagentRun, *, within: float = 60.0
) -> tuple[list[SubagentProgress], SubagentResult]:
    """Every progress item of ``run`` (until it settles, within ``within`` seconds) and
    its result; the run is disposed of on the way out. Asserts that the items ended
    because the run settled."""
    items: list[SubagentProgress] = []
    async with run:
        with anyio.fail_after(within):
            async for item in run.progress():
                items.append(item)
        assert run.settled  # the iteration ended because the run settled
        result = await run.result
    return items, result


def progress_kinds(items: Sequence[SubagentProgress]) -> list[str]:
    """The kinds of ``items`` in order, runs of the same kind collapsed."""
    kinds: list[str] = []
    for item in items:
        if not kinds or kinds[-1] != item.kind:
            kinds.append(item.kind)
    return kinds


def assert_one_grandchild(
    items: Sequence[SubagentProgress], *, provider: str, label: str, text: str
) -> str:
    """Assert that a run's progress ``items`` show exactly one grandchild: its
    ``child_start`` (``provider``, ``label``) on the one-element path naming it, its
    own text (``text``, joined) on that path, then its ``child_end`` (``completed``).
    Returns the grandchild's run id."""
    starts = [i for i in items if i.kind == "child_start"]
    assert len(starts) == 1, items
    grandchild = starts[0].run_id
    assert grandchild is not None
    assert starts[0].path == (grandchild,)
    assert (starts[0].provider, starts[0].label) == (provider, label)
    nested = "".join(i.text or "" for i in items if i.kind == "text" and i.path == (grandchild,))
    assert nested == text
    ends = [i for i in items if i.kind == "child_end"]
    assert [(e.path, e.stop_reason) for e in ends] == [((grandchild,), "completed")]
    assert list(items).index(starts[0]) < list(items).index(ends[0])
    return grandchild
