"""A turn cut off by a stopped process is taken up again on resume
(``ctx.agents.resume(..., cut_off_turn="continue")``): its tool calls without a result
run again (through the permission gate), a model call in flight is asked again with
the same history, completed steps are not repeated, and the queued message runs next.
The crash is simulated by restoring the session file as it was mid-turn (the real
SIGKILL is in tests-integration/test_continuable_resume_work.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from pydantic import BaseModel

from dsh.core import (
    Context,
    ScriptedAdapter,
    ScriptedReply,
    ScriptedToolCall,
    SessionStore,
    Tool,
    ToolContext,
    parse_preset,
)
from dsh.core._llm import BoundModel, ModelRequest
from dsh.core.sessions import Event, SessionHeader

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(20)]

PRESET = '[agent.model]\nadapter = "scripted"\n'
ALLOWED = PRESET + '[permissions.tools]\nwork = "allow"\n'


class Step(BaseModel):
    n: int


class Work:
    """A governed tool ``work`` that logs each run's ``n`` as it starts; a run whose
    ``n`` is in ``hang`` never returns (the step in flight when the process stops)."""

    def __init__(self, hang: set[int]) -> None:
        self.runs: list[int] = []
        self.hang = hang

    def tool(self) -> Tool:
        async def run(args: Step, tctx: ToolContext) -> str:
            self.runs.append(args.n)
            if args.n in self.hang:
                await anyio.sleep_forever()
            return f"step {args.n} done"

        return Tool.from_model("work", "does a step", Step, run, permission="ask")


def steps_script(hang_model_at: int | None = None) -> Callable[[ModelRequest], ScriptedReply]:
    """Model call k of turn 1 asks for ``work(n=k+1)`` for k < 2, then answers; any
    other turn answers with its step count. Call ``hang_model_at`` never answers."""

    def script(request: ModelRequest) -> ScriptedReply:
        events = request.events
        users = [e for e in events if e.type == "user/message"]
        results = sum(1 for e in events if e.type == "tool/result")
        if len(users) > 1:
            return ScriptedReply(text=f"turn 2 saw {results} results")
        if results == hang_model_at:
            return ScriptedReply(hang=True)
        if results < 2:
            call = ScriptedToolCall(name="work", arguments={"n": results + 1})
            return ScriptedReply(tool_calls=[call])
        return ScriptedReply(text="three steps done")

    return script


class Recorded:
    """A scripted model that keeps each request's log as it was when asked."""

    def __init__(self, script: Callable[[ModelRequest], ScriptedReply]) -> None:
        self.script = script
        self.requests: list[list[Event]] = []
        self.model = BoundModel(ScriptedAdapter(self.answer))

    def answer(self, request: ModelRequest) -> ScriptedReply:
        self.requests.append(list(request.events))
        return self.script(request)

    def call_numbers(self) -> list[int]:
        """The assistant messages already in each request (its model call number)."""
        return [sum(e.type == "assistant/message" for e in r) for r in self.requests]


async def until(predicate: Callable[[], bool]) -> None:
    with anyio.fail_after(10):
        while not predicate():
            await anyio.sleep(0.005)


async def crash_mid_turn(
    tmp_path: Path,
    work: Work,
    script: Callable[[ModelRequest], ScriptedReply],
    stuck: Callable[[list[Event]], bool],
) -> str:
    """Run turn 1 until ``stuck(events)``; leave its session file as a crash would."""
    async with Context.open(parse_preset(ALLOWED), sessions_dir=tmp_path) as ctx:
        ctx.tools.register(work.tool())
        agent = ctx.agents.create(model=Recorded(script).model)
        agent.followup("go")
        await until(lambda: stuck(list(agent.session.events)))
        crashed = (tmp_path / f"{agent.id}.jsonl").read_text()
        agent_id = agent.id
    (tmp_path / f"{agent_id}.jsonl").write_text(crashed)  # (closing wrote turn/end: undone)
    assert '"turn/end"' not in crashed
    return agent_id


def stop_reasons(events: list[Event]) -> list[str]:
    return [str(e.data["stop_reason"]) for e in events if e.type == "turn/end"]


async def test_a_tool_in_flight_runs_again_once_and_no_completed_step_repeats(
    tmp_path: Path,
) -> None:
    first = Work(hang={2})
    agent_id = await crash_mid_turn(
        tmp_path, first, steps_script(), lambda events: first.runs == [1, 2]
    )
    again = Work(hang=set())
    async with Context.open(parse_preset(ALLOWED), sessions_dir=tmp_path) as ctx:
        ctx.tools.register(again.tool())
        model = Recorded(steps_script())
        agent = ctx.agents.resume(agent_id, model=model.model, cut_off_turn="continue")
        assert agent.turns == 1
        assert agent.queued == 1  # the continuation, run ahead of the next message
        seen: list[Event] = []
        agent.observe(seen.append, deltas=False)
        outcome = await agent.run("next")
        assert outcome.turn == 2
        events = list(agent.session.events)
    assert again.runs == [2]  # tool 1 not again; tool 2 (in flight) once more
    # model calls 0 and 1 not asked again; call 2 once (the resumed turn), then turn 2
    assert model.call_numbers() == [2, 3]
    assert [e.type for e in model.requests[1][-2:]] == ["user/message", "turn/start"]
    assert stop_reasons(events) == ["completed", "completed"]
    starts = [e.data for e in events if e.type == "turn/start"]
    assert starts == [{"turn": 1}, {"turn": 1, "resumed": True}, {"turn": 2}]
    results = [e.data for e in events if e.type == "tool/result"]
    assert [r["content"][0]["text"] for r in results] == ["step 1 done", "step 2 done"]
    # observers see the resumed turn as a turn: start, the re-run's result, the end
    assert [e.type for e in seen][:4] == [
        "turn/start",
        "tool/result",
        "assistant/message",
        "turn/end",
    ]


async def test_a_model_call_in_flight_is_asked_again_with_the_same_history(
    tmp_path: Path,
) -> None:
    work = Work(hang=set())
    agent_id = await crash_mid_turn(
        tmp_path,
        work,
        steps_script(hang_model_at=1),
        lambda events: bool(events) and events[-1].type == "tool/result",
    )
    assert work.runs == [1]
    async with Context.open(parse_preset(ALLOWED), sessions_dir=tmp_path) as ctx:
        ctx.tools.register(work.tool())
        model = Recorded(steps_script())
        agent = ctx.agents.resume(agent_id, model=model.model, cut_off_turn="continue")
        before = [e for e in agent.session.events if e.type != "turn/start"]
        await agent.run("next")
        events = list(agent.session.events)
    assert work.runs == [1, 2]  # tool 1 not again; the turn goes on to tool 2
    assert [e for e in model.requests[0] if e.type != "turn/start"] == before  # same history
    assert model.call_numbers() == [1, 2, 3]
    assert stop_reasons(events) == ["completed", "completed"]
    final = [e for e in events if e.type == "assistant/message"]
    assert [e.data["content"][0]["text"] for e in final[-2:]] == [
        "three steps done",
        "turn 2 saw 2 results",
    ]


async def test_a_turn_whose_last_step_had_ended_it_ends_without_a_model_call(
    tmp_path: Path,
) -> None:
    store = SessionStore(tmp_path)
    session = store.create(SessionHeader("ended"))
    session.append("user/message", {"content": [{"type": "text", "text": "go"}]})
    session.append("turn/start", {"turn": 1})
    text = [{"type": "text", "text": "answered"}]
    session.append("assistant/message", {"content": text, "stop_reason": "max-tokens"})
    session.close()
    async with Context.open(parse_preset(PRESET), sessions_dir=tmp_path) as ctx:
        model = Recorded(lambda request: ScriptedReply(text="second"))
        agent = ctx.agents.resume("ended", model=model.model, cut_off_turn="continue")
        await agent.run("again")
        assert stop_reasons(list(agent.session.events)) == ["max-tokens", "completed"]
    assert model.call_numbers() == [1]  # the new message's only


async def test_a_re_run_goes_through_the_permission_gate_and_can_be_cancelled(
    tmp_path: Path,
) -> None:
    first = Work(hang={2})
    agent_id = await crash_mid_turn(
        tmp_path, first, steps_script(), lambda events: first.runs == [1, 2]
    )
    denied = parse_preset(PRESET + '[permissions.tools]\nwork = "deny"\n')
    again = Work(hang={2})
    async with Context.open(denied, sessions_dir=tmp_path) as ctx:
        ctx.tools.register(again.tool())
        model = Recorded(steps_script()).model
        agent = ctx.agents.resume(agent_id, model=model, cut_off_turn="continue")
        agent.resume()  # the continuation alone, no new message
        await agent.when_idle()
        result = [e.data for e in agent.session.events if e.type == "tool/result"][-1]
    assert again.runs == []  # denied here: not run
    assert result["is_error"]
    assert result.get("data") == {"permission": "denied"}
    # allowed, and cancelled while the re-run hangs: the turn ends aborted, nothing lost
    second = Work(hang={2})
    agent_id = await crash_mid_turn(
        tmp_path, second, steps_script(), lambda events: second.runs == [1, 2]
    )
    again = Work(hang={2})
    async with Context.open(parse_preset(ALLOWED), sessions_dir=tmp_path) as ctx:
        ctx.tools.register(again.tool())
        model = Recorded(steps_script()).model
        agent = ctx.agents.resume(agent_id, model=model, cut_off_turn="continue")
        agent.followup("kept")
        await until(lambda: again.runs == [2])
        agent.cancel("stop it")
        await agent.when_idle()
        assert stop_reasons(list(agent.session.events)) == ["aborted"]
        assert agent.queued == 1  # the followup is kept
