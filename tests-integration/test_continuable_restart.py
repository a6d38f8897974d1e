"""A continuable child survives its parent *process*: a real child process runs a
parent that starts a continuable subagent (through the real plugin loader and
tools) and is SIGKILLed while the subagent is mid-turn. This process then
resumes the parent from the same sessions directory and continues the subagent
from its persisted session; while the first process lived, the subagent's
activation lock kept it from being activated twice. The turn the kill cut off is taken
up again before the new message (the default, ``cut_off_turn = "continue"``), or, with
the row's ``agent_options = { cut_off_turn = "abort" }``, closed ``aborted``."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import anyio
import pytest

from dsh.core import (
    Context,
    ModelRequest,
    ScriptedAdapter,
    ScriptedReply,
    SessionStore,
    parse_preset,
    text_of,
)
from dsh.core.models import BoundModel
from dsh.subagent import NOTICE_SETTLED, SubagentError, SubagentRuntime
from dsh.testing.scripting import call, last_user_text, steps_in_turn

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

PRESET = """
[agent.model]
adapter = "scripted"

[[plugin]]
name = "dsh-subagent-spawn-in-process"

[[plugin]]
name = "dsh-tool-subagent"
config = { provider = "spawn", enable_run_in_background = true, background_mode = "continuable" }

[[plugin]]
name = "dsh-tool-subagent-control"

[[plugin]]
name = "dsh-tool-subagent-report"
"""

# The parent and child share this script (the child's system prompt marks it).
# parent: "start <p>" delegates in the background, "send <m>" messages the child,
# notices are answered "noted"; child: "hang" never answers, else "child: <p>".
SCRIPT = """
def script(request):
    text = last_user_text(request)
    if "You are a subagent" in request.system:
        if text == "hang":
            return ScriptedReply(hang=True)
        return ScriptedReply(text="child: " + text)
    if steps_in_turn(request) > 0:
        return ScriptedReply(text="{tool_results}")
    users = [e for e in request.events if e.type == "user/message"]
    if users and users[-1].data.get("kind") == "notice":
        return ScriptedReply(text="noted")
    command, _, rest = text.partition(" ")
    if command == "start":
        return ScriptedReply(tool_calls=[
            call("subagent", description="worker", prompt=rest, run_in_background=True)
        ])
    child = next(
        e.data["data"]["agent_id"] for e in request.events
        if e.type == "tool/result" and "agent_id" in (e.data.get("data") or {})
    )
    return ScriptedReply(tool_calls=[call("send_message", agent_id=child, message=rest)])
"""

FIRST_PROCESS = (
    """
import json, sys
import anyio
from dsh.core import Context, ScriptedAdapter, ScriptedReply, parse_preset
from dsh.core.models import BoundModel
from dsh.subagent import SubagentRuntime
from dsh.testing.scripting import call, last_user_text, steps_in_turn
"""
    + SCRIPT
    + """
async def main(sessions, preset):
    async with Context.open(parse_preset(preset), sessions_dir=sessions) as ctx:
        parent = ctx.agents.create(model=BoundModel(ScriptedAdapter(script)))
        await parent.run("start first")
        child_id = next(
            e.data["data"]["agent_id"] for e in parent.session.events if e.type == "tool/result"
        )
        child = SubagentRuntime.of(ctx).continuable.get(child_id)
        while child.status == "running" or parent.running:
            await anyio.sleep(0.005)
        await parent.run("send hang")
        while child.agent.turns < 2 or parent.running:
            await anyio.sleep(0.005)
        print(json.dumps({"parent": parent.id, "child": child_id}), flush=True)
        await anyio.sleep_forever()

anyio.run(main, sys.argv[1], sys.argv[2])
"""
)

namespace: dict[str, object] = {
    "ScriptedReply": ScriptedReply,
    "call": call,
    "last_user_text": last_user_text,
    "steps_in_turn": steps_in_turn,
}
exec(SCRIPT, namespace)


def script(request: ModelRequest) -> ScriptedReply:
    """The same script in this process, except that the child's "hang" (the model
    call the kill cut off, asked again when its turn is taken up) is answered here."""
    if "You are a subagent" in request.system and last_user_text(request) == "hang":
        return ScriptedReply(text="child: hang, answered after the restart")
    fn = namespace["script"]
    assert callable(fn)
    result = fn(request)
    assert isinstance(result, ScriptedReply)
    return result


ABORT = PRESET.replace(
    'background_mode = "continuable"',
    'background_mode = "continuable", agent_options = { cut_off_turn = "abort" }',
)
assert ABORT != PRESET


async def until(predicate: object, timeout: float = 10) -> None:
    assert callable(predicate)
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.005)


@pytest.mark.parametrize("cut_off", ["continue", "abort"])
async def test_a_continuable_child_is_resumed_after_its_parent_process_was_killed(
    tmp_path: Path, cut_off: str
) -> None:
    preset = ABORT if cut_off == "abort" else PRESET
    process = await anyio.open_process(
        [sys.executable, "-c", FIRST_PROCESS, str(tmp_path), preset],
        stdin=None,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert process.stdout is not None
        with anyio.fail_after(30):
            line = b""
            async for chunk in process.stdout:
                line += chunk
                if b"\n" in line:
                    break
        ids = json.loads(line.decode())
        parent_id, child_id = ids["parent"], ids["child"]

        # while the first process lives, its activation lock keeps the child there
        async with Context.open(parse_preset(preset), sessions_dir=tmp_path) as ctx:
            parent = ctx.agents.resume(parent_id, model=BoundModel(ScriptedAdapter(script)))
            with pytest.raises(SubagentError) as info:
                await SubagentRuntime.of(ctx).continuable.send_message(parent, child_id, "x")
            assert info.value.code == "DUPLICATE_CHILD"
            assert f"(pid {process.pid})" in info.value.message
    finally:
        process.send_signal(signal.SIGKILL)  # the parent process dies mid-turn
        with anyio.fail_after(10):
            await process.wait()
        if process.stdout is not None:
            await process.stdout.aclose()
        if process.stderr is not None:
            await process.stderr.aclose()

    on_disk = SessionStore(tmp_path).load(child_id).events
    assert [e.type for e in on_disk][-2:] == ["user/message", "turn/start"]  # cut off

    async with Context.open(parse_preset(preset), sessions_dir=tmp_path) as ctx:
        parent = ctx.agents.resume(parent_id, model=BoundModel(ScriptedAdapter(script)))
        continuable = SubagentRuntime.of(ctx).continuable
        (listed,) = continuable.list(parent)
        assert (listed.id, listed.status, listed.live) == (child_id, "idle", False)
        assert listed.diagnostic == "its turn 2 was cut off when its process stopped"
        await parent.run("send third")
        result = [e for e in parent.session.events if e.type == "tool/result"][-1]
        assert result.data["data"]["delivery"] == "resumed"
        child = continuable.get(child_id)
        assert child is not None
        await until(lambda: child.status == "settled" and not parent.running)
        assert child.last_output == "child: third"
        assert child.agent is not None
        ends = [
            (e.data["stop_reason"], e.data.get("error"))
            for e in child.agent.session.events
            if e.type == "turn/end"
        ]
        cut = (
            ("completed", None)  # turn 2, taken up again
            if cut_off == "continue"
            else ("aborted", "the process stopped before this turn ended")
        )
        assert ends == [("completed", None), cut, ("completed", None)]
        answers = [
            text_of(e.data["content"])
            for e in child.agent.session.events
            if e.type == "assistant/message"
        ]
        if cut_off == "continue":
            assert answers == [
                "child: first",
                "child: hang, answered after the restart",
                "child: third",
            ]
        else:
            assert answers == ["child: first", "child: third"]
        users = [
            text_of(e.data["content"])
            for e in child.agent.session.events
            if e.type == "user/message"
        ]
        assert users == ["first", "hang", "third"]
        settled = [
            e.data["source"]
            for e in parent.session.events
            if e.type == "user/message" and e.data.get("source", {}).get("type") == NOTICE_SETTLED
        ]
        assert [(s["status"], s["turn"]) for s in settled][-1] == ("settled", 3)
