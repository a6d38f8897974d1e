"""The collector's schedule: tuned once per process, never over an application's own."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from dsh.core import AbortSignal, Context, parse_preset
from dsh.core import _gc as gc_module
from dsh.core.lifecycle import tune_gc


@pytest.fixture
def fresh() -> Iterator[None]:
    saved, tuned = gc.get_threshold(), gc_module._tuned
    gc_module._tuned = False
    gc.set_threshold(*gc_module.CPYTHON_DEFAULT_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*saved)
        gc_module._tuned = tuned


def test_full_collections_are_made_rarer_once(fresh: None) -> None:
    assert tune_gc() is True
    assert gc.get_threshold() == gc_module.TUNED_THRESHOLDS
    assert gc.isenabled()
    gc.set_threshold(700, 10, 10)
    assert tune_gc() is False  # once per process
    assert gc.get_threshold() == (700, 10, 10)


def test_an_application_s_own_thresholds_are_kept(fresh: None) -> None:
    gc.set_threshold(5000, 20, 20)
    assert tune_gc() is False
    assert gc.get_threshold() == (5000, 20, 20)


def test_the_tuning_can_be_turned_off(fresh: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSH_GC_TUNING", "off")
    assert tune_gc() is False
    assert gc.get_threshold() == gc_module.CPYTHON_DEFAULT_THRESHOLDS


@pytest.mark.anyio
async def test_context_open_tunes(fresh: None) -> None:
    async with Context.open(parse_preset('[agent.model]\nadapter = "scripted"\n')):
        assert gc.get_threshold() == gc_module.TUNED_THRESHOLDS


def test_abort_disposers_hold_no_cycle() -> None:
    signal = AbortSignal()
    seen: list[str] = []
    unlink = signal.on_abort(seen.append)
    unlink()
    unlink()  # idempotent
    signal.abort("x")
    assert seen == []
    gc.collect()
    gc.disable()
    try:
        for _ in range(100):
            other = AbortSignal()
            other.on_abort(seen.append)()
            _child, off = other.linked()
            off()
        assert gc.collect() == 0
    finally:
        gc.enable()


@pytest.mark.anyio
async def test_unobserve_and_the_observe_disposer() -> None:
    async with Context.open(parse_preset('[agent.model]\nadapter = "scripted"\n')) as ctx:
        agent = ctx.agents.create()
        seen: list[str] = []

        def observer(event: object) -> None:
            seen.append(getattr(event, "type", ""))

        off = agent.observe(observer)
        agent.record("note", {})
        off()
        off()
        agent.record("note", {})
        agent.observe(observer, deltas=False)
        agent.unobserve(observer)
        agent.record("note", {})
        assert seen == ["note"]
