"""The :class:`Budget` value: validation naming the bad value and the fix; the tree
meter's arithmetic (charges go up, a child gets what its parent has left)."""

from __future__ import annotations

import pytest

from dsh.subagent import Budget, SubagentError
from dsh.subagent._meter import BudgetMeter

pytestmark = [pytest.mark.timeout(10)]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"tokens": 0}, "budget tokens must be a positive integer (input + output tokens), got 0"),
        ({"tokens": 1.5}, "budget tokens must be a positive integer"),
        ({"tokens": True}, "got True"),
        ({"usd": -1}, "budget usd must be a positive number of US dollars, got -1"),
        ({"usd": float("nan")}, "got nan"),
        ({"seconds": 0}, "budget seconds must be a positive number of seconds"),
        ({"children": -1}, "budget children must be a non-negative integer"),
        ({"turns": "8"}, "budget turns must be a positive integer (model calls), got '8'"),
    ],
)
def test_bad_caps_are_refused_naming_the_value_and_the_fix(
    fields: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=r"leave .* unset for no cap") as info:
        Budget(**fields)  # type: ignore[arg-type]
    assert message in str(info.value)


def test_json_round_trip_and_unknown_caps() -> None:
    budget = Budget(tokens=20000, usd=0.5, seconds=300, children=10, turns=8)
    assert Budget.from_json(budget.to_json()) == budget
    assert Budget(children=0).to_json() == {"children": 0}
    with pytest.raises(ValueError, match="unknown budget cap 'dollars'; the caps are tokens"):
        Budget.from_json({"dollars": 1})


def test_within_takes_the_smaller_cap() -> None:
    mine = Budget(tokens=100, seconds=10)
    assert mine.within(Budget(tokens=50, usd=1.0)) == Budget(tokens=50, usd=1.0, seconds=10)
    assert mine.within(None) is mine


def test_charges_go_up_the_chain_and_children_get_the_remainder() -> None:
    stopped: list[str] = []
    root = BudgetMeter(Budget(tokens=1000, children=3), None, stopped.append)
    child = BudgetMeter(Budget(tokens=400), root, stopped.append)
    child.charge_call({"input_tokens": 300, "output_tokens": 50})
    assert (root.tokens, root.turns, child.tokens) == (350, 1, 350)
    assert child.remaining() == Budget(tokens=50, children=3)
    assert not child.check()
    child.charge_call({"input_tokens": 60})
    assert child.check()
    assert stopped == ["token budget 400 reached: 410 tokens used"]
    assert child.verdict() == ("budget", "token budget 400 reached: 410 tokens used")
    assert root.verdict() is None
    child.charge_child()
    child.charge_child()
    child.charge_child()
    with pytest.raises(SubagentError, match="children budget 3 reached: 3 delegations started"):
        child.charge_child()
    assert root.tripped == ("budget", "children budget 3 reached: 3 delegations started")


@pytest.mark.anyio
async def test_one_timer_serves_every_time_cap() -> None:
    import anyio

    from dsh.subagent._meter import Deadlines

    deadlines = Deadlines()
    stopped: list[str] = []

    def watched(seconds: float) -> BudgetMeter:
        meter = BudgetMeter(Budget(seconds=seconds), None, stopped.append)
        deadlines.add(meter)
        return meter

    settled = [watched(0.05) for _ in range(200)]
    for meter in settled:  # settled before their deadline: never trip
        meter.release()
        deadlines.discard(meter)
    assert deadlines.watched == 0  # dropped as they settled
    late = watched(30)
    soon = watched(0.1)
    with anyio.fail_after(5):
        while soon.tripped is None:
            await anyio.sleep(0.01)
    assert soon.tripped[1].startswith("time budget 0.1 s reached: ")
    assert late.tripped is None
    assert stopped == [soon.tripped[1]]
    late.release()
    deadlines.discard(late)
    assert deadlines.watched == 0  # nothing left to watch
