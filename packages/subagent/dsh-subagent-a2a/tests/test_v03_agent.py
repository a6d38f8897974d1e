"""The ``a2a`` provider polling an A2A agent, 1.0 or 0.3 (``sdk_agent.py --v03``: a 0.3
card, the 0.3 methods): every step once, and a ``CancelTask`` answer that says the task
is over ends the run at once."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from dsh.core import AbortSignal
from dsh.testing.fixtures import progress_and_result

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

GRACE = 8.0
"""A cancel_grace far longer than a confirmed cancel takes."""


@pytest.mark.parametrize("v03", [False, True])
async def test_polling_sees_every_step_once(rig: Any, tmp_path: Path, kit: Any, v03: bool) -> None:
    options = ["--no-streaming", *(["--v03"] if v03 else [])]
    agent = kit.start_sdk_agent(tmp_path, *options)
    try:
        name = rig.register(agent.url, poll_interval=0.3, name=f"poller{int(v03)}")
        run = await rig.start(name, "steps please")
        items, result = await progress_and_result(run, within=30)
        assert (result.stop_reason, result.output) == ("completed", "Echo: steps please")
        texts = [i.text for i in items if i.kind == "text"]
        assert texts[:4] == ["Thinking...", "step 1", "step 2", "step 3"], texts
        assert "".join(texts[4:]) == "Echo: steps please", texts
    finally:
        agent.stop()


@pytest.mark.parametrize("v03", [False, True])
async def test_a_cancel_the_answer_confirms_ends_the_run_at_once(
    rig: Any, tmp_path: Path, kit: Any, v03: bool
) -> None:
    """Polling every 20 s: only the ``CancelTask`` answer can say the task is over."""
    options = ["--no-streaming", *(["--v03"] if v03 else [])]
    agent = kit.start_sdk_agent(tmp_path, *options)
    try:
        name = rig.register(
            agent.url, poll_interval=20.0, cancel_grace=GRACE, name=f"slow{int(v03)}"
        )
        signal = AbortSignal()
        run = await rig.start(name, "please hang", signal)
        async with run:
            await anyio.sleep(0.5)  # the task exists (the send returned it)
            signal.abort("stop it")
            asked = time.monotonic()
            with anyio.fail_after(GRACE + 10):
                result = await run.result
            took = time.monotonic() - asked
        assert result.stop_reason == "aborted"
        assert result.diagnostic == "stop it", result.diagnostic
        assert took < GRACE / 2, took
    finally:
        agent.stop()
