"""The conformance suite fails an in-process provider whose ``dispose()`` returns while
the child is still at work, and names the rule it broke.

A generated test file subclasses the suite four times over one small in-process
provider (a real child :class:`~dsh.core.Agent`, settled from its ``turn/end``):

* ``careful`` — dispose cancels the child and waits until it is closed: passes all;
* ``leaky`` — dispose cancels the child and returns at once, while the child's turn
  (slow to wind down) is still running;
* ``leaky_task`` — the provider drives the child from a task of its own that does
  some bookkeeping after the turn; dispose waits until the agent is idle but not for
  that task. The agent is not ``running`` any more: only the task check sees it;
* ``deaf`` — the child never hears the request's signal: a cancel is not settled
  within the bound, and the failure says so rather than raising a bare timeout.

The file runs in a pytest subprocess, so the outcome depends on no test order here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree

import pytest

pytestmark = pytest.mark.timeout(120)

GENERATED = '''\
from __future__ import annotations

import anyio
import pytest

from dsh.core import Context, ScriptedReply, last_output, parse_preset
from dsh.subagent import (
    NO_START_CAPABILITIES,
    RunHandle,
    StartAborted,
    SubagentResult,
    SubagentRuntime,
)
from dsh.testing.conformance import ConformanceHarness, ProviderConformance
from dsh.testing.scripting import last_user_text, model

pytestmark = pytest.mark.timeout(30)


def slow_to_stop(request):
    """Hangs on "hang" and takes 0.5 s to wind down when cancelled; fails on "fail"."""
    text = last_user_text(request)

    async def hang():
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.5)

    if text == "hang":
        return hang()
    if text == "fail":
        return ScriptedReply(error="scripted model failure")
    return ScriptedReply(text="done: " + text)


def quick_to_stop(request):
    text = last_user_text(request)
    if text == "hang":
        return ScriptedReply(hang=True)
    if text == "fail":
        return ScriptedReply(error="scripted model failure")
    return ScriptedReply(text="done: " + text)


class InProcessProvider:
    capabilities = NO_START_CAPABILITIES
    inherits_parent_context = False

    def __init__(self, mode):
        self.name = mode
        self.mode = mode

    async def start(self, request):
        if request.signal.aborted:
            raise StartAborted(f"subagent start aborted: {request.signal.reason}")
        script = quick_to_stop if self.mode == "leaky_task" else slow_to_stop
        child = request.parent.ctx.agents.create(parent=request.parent, model=model(script))
        if self.mode == "deaf":  # never hears the signal
            unlink = lambda: None  # noqa: E731
        else:
            unlink = request.signal.on_abort(child.cancel)

        def on_event(event):
            if event.type == "turn/end":
                stop = event.data["stop_reason"]
                error = event.data.get("error")
                handle.settle(
                    SubagentResult(
                        last_output(child.session.events),
                        stop,
                        diagnostic=str(error) if error is not None else None,
                    )
                )

        async def bookkeeping_after_the_turn():
            try:
                await child.run(request.prompt_blocks)
            finally:
                with anyio.CancelScope(shield=True):
                    await anyio.sleep(0.5)

        async def dispose():
            unlink()
            if self.mode == "leaky":
                child.cancel("disposed")  # ... and does not wait
            elif self.mode == "leaky_task":
                child.cancel("disposed")
                await child.when_idle()  # ... but not for its own task
            else:
                await child.aclose("disposed")

        handle = RunHandle(
            child.id, provider=self.name, dispose=dispose, local_agent=child, label=request.label
        )
        child.observe(on_event, deltas=False)
        if self.mode == "leaky_task":
            request.parent.ctx.spawn(bookkeeping_after_the_turn)
        else:
            child.followup(request.prompt_blocks)
        return handle.run


class Base(ProviderConformance):
    mode = ""

    @pytest.fixture
    async def harness(self):
        async with Context.open(parse_preset('[agent.model]\\nadapter = "scripted"\\n')) as ctx:
            SubagentRuntime.of(ctx).register_provider(InProcessProvider(self.mode))
            yield ConformanceHarness(
                ctx,
                self.mode,
                ctx.agents.create(),
                complete_prompt="say hi",
                expected_output="done: say hi",
                hang_prompt="hang",
                fail_prompt="fail",
                cancel_bound=1.5,
            )


class TestCareful(Base):
    mode = "careful"


class TestLeaky(Base):
    mode = "leaky"


class TestLeakyTask(Base):
    mode = "leaky_task"


class TestDeaf(Base):
    mode = "deaf"
'''

QUIESCENT = "conformance rule 'dispose leaves the child quiescent' broken"

DISPOSE_TESTS = {
    "test_dispose_is_idempotent_concurrent_and_quiescent",
    "test_dispose_twice_with_the_waiter_cancelled_one_tick_later",
}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, str]]:
    """``Class::test`` → (passed | failed | error | skipped, message) for the generated file."""
    folder = tmp_path_factory.mktemp("leaky-provider")
    (folder / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    (folder / "test_leaky_provider.py").write_text(GENERATED)
    report = folder / "report.xml"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")}
    env["CI"] = "true"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-p",
            "dsh.testing.pytest_plugin",
            f"--junitxml={report}",
            # the careful provider runs the whole suite, the others the tests they fail
            "-k",
            "Careful or (Leaky and dispose) or (Deaf and cancel_after)",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=folder,
        timeout=100,
    )
    assert report.exists(), done.stdout + done.stderr
    found: dict[str, tuple[str, str]] = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for kind in ("failure", "error", "skipped"):
            element = case.find(kind)
            if element is not None:
                outcome = "failed" if kind == "failure" else kind
                message = (element.get("message") or "") + "\n" + (element.text or "")
                break
        cls = case.get("classname", "").rsplit(".", 1)[-1]
        name = case.get("name", "").split("[", 1)[0]  # without the [asyncio] backend id
        found[f"{cls}::{name}"] = (outcome, message)
    return found


def test_a_careful_in_process_provider_passes_the_whole_suite(
    outcomes: dict[str, tuple[str, str]],
) -> None:
    careful = {name: result for name, result in outcomes.items() if name.startswith("TestCareful")}
    assert len(careful) >= 9, outcomes
    failed = {name: message for name, (outcome, message) in careful.items() if outcome != "passed"}
    assert not failed, failed


@pytest.mark.parametrize("cls", ["TestLeaky", "TestLeakyTask"])
def test_a_provider_that_leaks_its_child_on_dispose_fails_naming_the_rule(
    outcomes: dict[str, tuple[str, str]], cls: str
) -> None:
    for test in DISPOSE_TESTS:
        outcome, message = outcomes[f"{cls}::{test}"]
        assert outcome == "failed", (test, outcome, message)
        assert QUIESCENT in message, message
        assert "TimeoutError" not in message
        if cls == "TestLeaky":
            assert "is still running" in message or "still pending" in message, message
        else:
            # the agent is idle: only the task created for the run betrays the leak
            assert "still pending" in message, message
            assert "bookkeeping_after_the_turn" in message, message


def test_a_run_that_ignores_its_cancel_fails_naming_the_rule(
    outcomes: dict[str, tuple[str, str]],
) -> None:
    outcome, message = outcomes[
        "TestDeaf::test_cancel_after_publication_settles_aborted_within_bound"
    ]
    assert outcome == "failed", message
    assert (
        "conformance rule 'cancel after publication settles aborted within the bound' broken:"
        " the cancelled run did not settle (waited 1.5 s)"
    ) in message
    assert "TimeoutError" not in message
