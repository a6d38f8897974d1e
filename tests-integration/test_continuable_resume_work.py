"""What a cold-resumed continuable child does again (issue 24, item 4; the companion of
test_continuable_restart.py, which checks the resume itself).

A real child process opens a context with a sessions directory and starts a
continuable ``spawn`` child whose model is the fake OpenAI chat server and whose tool
is a real command (``run``, /bin/sh) that appends to a file as it starts. The child
makes 3 model calls and 2 complete tool runs; its third tool blocks on a release file,
and the process is SIGKILLed while it runs. This process then resumes the parent from
the sessions directory and ``send_message``s the child. The fake server counts the
child's model calls by call number (the assistant turns already in the request) and the
file counts the tool runs, so the test measures what repeats: only the step in flight.
The completed model calls and tool runs are answered by the session log; the cut-off
turn is taken up again before the new message (at least once for the step in flight;
see docs/background-and-continuable.md, "Durability"): the tool that was running runs
again, once, then the model is asked for the turn's next step, then the new message's
turn runs. A second case kills the process while the child's third model call is
unanswered (the fake server's stream hangs, the first time only): no completed call or
tool run repeats, the unanswered call is asked again with the same history, and the
turn goes on. A third case starts the child with ``agent_options = {"cut_off_turn":
"abort"}`` (at most once): the cut-off turn is closed ``aborted``, the tool in flight
is not run again and the model is told it was interrupted."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from dsh.core import Context, SessionStore, parse_preset
from dsh.subagent import SubagentRuntime
from dsh.testing.model_servers import (
    ChatReply,
    ChatToolCall,
    OpenAIChatServer,
    RecordedRequest,
    StreamFaults,
)
from dsh.testing.processes import wait_until_gone

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

PRESET = """
[[plugin]]
name = "dsh-llm-openai"

[[plugin]]
name = "dsh-subagent-spawn-in-process"

[[plugin]]
name = "dsh-testing-example"
config = {{ command_tool = "run" }}

[agent.model]
adapter = "openai"
model = "fake-model"
[agent.model.options]
base_url = "{base_url}"
api_key_env = ""
"""

TASK = "CHILDTASK: run the three steps"
AGAIN = "GOON: where are you?"
INTERRUPTED = "(no result: the tool call was interrupted before it finished)"

FIRST_PROCESS = """
import json, sys
import anyio
from dsh.core import AbortSignal, Context, parse_preset
from dsh.subagent import SubagentRuntime, SubagentStartRequest

async def main(sessions, cwd, preset, task, options):
    async with Context.open(parse_preset(preset), sessions_dir=sessions, cwd=cwd) as ctx:
        parent = ctx.agents.create()
        request = SubagentStartRequest(
            task, parent, AbortSignal(), label="steps", agent_options=json.loads(options)
        )
        child = await SubagentRuntime.of(ctx).start_continuable("spawn", request)
        print(json.dumps({"parent": parent.id, "child": child.id}), flush=True)
        await anyio.sleep_forever()

anyio.run(main, *sys.argv[1:6])
"""


def _messages(request: RecordedRequest) -> list[dict[str, Any]]:
    messages = request.json["messages"]
    assert isinstance(messages, list)
    return messages


def first_user(request: RecordedRequest) -> str:
    """The text of the request's first user message (the agent's task)."""
    return next(str(m["content"]) for m in _messages(request) if m["role"] == "user")


def call_number(request: RecordedRequest) -> int:
    """The assistant turns already in the request (0: the agent's first call)."""
    return sum(1 for m in _messages(request) if m["role"] == "assistant")


def _answer(runs: Path, release: Path, pid_file: Path, in_flight: str) -> Any:
    """The child runs three steps; the one in flight at the kill blocks: the third
    tool (``in_flight="tool"``, on ``release``) or the third model call (``"model"``,
    a stream that never ends, the first time it is asked)."""
    hung: list[RecordedRequest] = []

    def answer(request: RecordedRequest) -> ChatReply:
        messages = _messages(request)
        if first_user(request) != TASK:  # the parent, told the child settled
            return ChatReply(text="noted")
        last = messages[-1]
        if last["role"] == "user" and "GOON" in str(last["content"]):
            results = [str(m["content"]) for m in messages if m["role"] == "tool"]
            return ChatReply(text=f"resumed with {len(results)} results: " + " | ".join(results))
        done = sum(1 for m in messages if m["role"] == "tool")
        if done == 2 and in_flight == "model" and not hung:
            hung.append(request)
            return ChatReply(text="never seen", faults=StreamFaults(hang_after=0))
        if done < 3:
            script = f"echo {done + 1} >> {runs}"
            if done == 2:  # the third tool blocks until released: the step in flight
                script += f"; echo $$ > {pid_file}; while [ ! -e {release} ]; do sleep 0.05; done"
            argv = ["/bin/sh", "-c", script]
            return ChatReply(tool_calls=[ChatToolCall("run", {"argv": argv})])
        return ChatReply(text="all three ran")

    return answer


async def until(predicate: Any, within: float, what: Any) -> None:
    """Wait for ``predicate()``; fail with ``what()`` after ``within`` seconds."""
    try:
        with anyio.fail_after(within):
            while not predicate():
                await anyio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(what()) from None


@dataclass
class Resumed:
    """What the model server saw and the tools did, and how the child ended."""

    requests: list[RecordedRequest]
    runs: list[str]
    output: str | None
    ends: list[str]

    def child(self) -> list[RecordedRequest]:
        """The child's model calls (the parent's, answering the notice, left out)."""
        return [r for r in self.requests if first_user(r) == TASK]

    def calls(self) -> Counter[int]:
        """How many times the child's model calls of each call number were made."""
        return Counter(call_number(r) for r in self.child())

    def tool_results(self) -> list[str]:
        """The tool results in the child's last model call."""
        return [str(m["content"]) for m in _messages(self.child()[-1]) if m["role"] == "tool"]


async def kill_and_resume(
    tmp_path: Path, in_flight: str, options: dict[str, Any] | None = None
) -> Resumed:
    """Run the child (its ``agent_options``: ``options``) in a process of its own,
    SIGKILL it with the step ``in_flight`` running after 2 complete steps, then resume
    the parent here and message the child."""
    runs, release, pid_file = tmp_path / "runs.txt", tmp_path / "release", tmp_path / "tool.pid"
    sessions, work = tmp_path / "sessions", tmp_path / "work"
    work.mkdir()
    with OpenAIChatServer(default=_answer(runs, release, pid_file, in_flight)) as model:
        preset = PRESET.format(base_url=model.api_base)
        argv = [sys.executable, "-c", FIRST_PROCESS, str(sessions), str(work), preset, TASK]
        argv.append(json.dumps(options or {}))
        process = await anyio.open_process(
            argv, stdin=None, env={**os.environ, "PYTHONUNBUFFERED": "1"}
        )
        tool_pid = None
        try:
            assert process.stdout is not None
            with anyio.fail_after(30):
                line = b""
                async for chunk in process.stdout:
                    line += chunk
                    if b"\n" in line:
                        break
            ids = json.loads(line.decode())
            if in_flight == "tool":  # 3 model calls made, 2 tool runs done, the third running
                await until(
                    lambda: pid_file.exists() and pid_file.read_text().strip() != "",
                    30,
                    lambda: runs.read_text() if runs.exists() else "no run",
                )
                tool_pid = int(pid_file.read_text())
                assert runs.read_text().split() == ["1", "2", "3"]
            else:  # 2 model calls made and 2 tool runs done, the third call unanswered
                await until(lambda: len(model.requests) == 3, 30, lambda: model.requests)
                assert runs.read_text().split() == ["1", "2"]
            assert Counter(call_number(r) for r in model.requests) == {0: 1, 1: 1, 2: 1}
        finally:
            process.send_signal(signal.SIGKILL)  # mid-step: no chance to write anything
            with anyio.fail_after(10):
                await process.wait()
            for stream in (process.stdout, process.stderr):
                if stream is not None:
                    await stream.aclose()
            release.touch()  # the orphaned tool command (own session) may now end
            if tool_pid is not None:
                await anyio.to_thread.run_sync(wait_until_gone, [tool_pid], 10)

        on_disk = len(SessionStore(sessions).load(ids["child"]).events)
        async with Context.open(parse_preset(preset), sessions_dir=sessions, cwd=work) as ctx:
            parent = ctx.agents.resume(ids["parent"])
            continuable = SubagentRuntime.of(ctx).continuable
            (listed,) = continuable.list(parent)
            assert (listed.id, listed.status) == (ids["child"], "idle")
            assert listed.diagnostic == "its turn 1 was cut off when its process stopped"
            child, how = await continuable.send_message(parent, ids["child"], AGAIN)
            assert how == "resumed"
            await until(lambda: child.status != "running", 30, lambda: child.status)
            assert child.status == "settled", child.diagnostic
            assert child.agent is not None
            ends = [
                e.data["stop_reason"] for e in child.agent.session.events if e.type == "turn/end"
            ]
            # the parent answers each settle notice (one per child turn run here) before
            # the context closes
            ran = sum(e.type == "turn/start" for e in child.agent.session.events[on_disk:])
            await until(
                lambda: notices(parent.session.events) == ran and not parent.running,
                30,
                lambda: "the parent never got or answered the settle notices",
            )
            answered = sum(e.type == "assistant/message" for e in parent.session.events)
            outcome = Resumed(
                list(model.requests), runs.read_text().split(), child.last_output, ends
            )
    # the parent's calls ("noted"): one per assistant message in its log, none lost
    assert len(outcome.requests) - len(outcome.child()) == answered >= 1
    return outcome


def notices(events: Any) -> int:
    """The settlement notices in a parent's log."""
    return sum(
        1
        for e in events
        if e.type == "user/message" and e.data.get("source", {}).get("type") == "subagent/settled"
    )


async def test_a_cold_resumed_child_repeats_no_completed_step_and_reruns_the_tool_in_flight(
    tmp_path: Path,
) -> None:
    resumed = await kill_and_resume(tmp_path, "tool")
    # turn 1 is taken up again and completes; then the new message's turn
    assert resumed.ends == ["completed", "completed"]
    # The model: the 3 completed calls are not asked again; call 3 is the resumed turn's
    # next step (after the re-run tool), call 4 the answer to the new message.
    assert resumed.calls() == {0: 1, 1: 1, 2: 1, 3: 1, 4: 1}
    # The tools: the 2 completed runs are not run again; the one in flight runs again, once.
    assert resumed.runs == ["1", "2", "3", "3"]
    # What the model is told of the third call: its result (from the re-run).
    results = resumed.tool_results()
    assert len(results) == 3
    assert INTERRUPTED not in results
    assert results[2] == results[1]  # (the command's output: nothing, as for the second)
    assert resumed.output == "resumed with 3 results: " + " | ".join(results)


async def test_a_model_call_in_flight_is_asked_again_with_the_same_history(
    tmp_path: Path,
) -> None:
    resumed = await kill_and_resume(tmp_path, "model")
    assert resumed.ends == ["completed", "completed"]
    # Calls 0 and 1 are not asked again. Call 2 was asked, never answered, and is asked
    # again by the resumed turn with the same history; then the turn goes on (tool 3,
    # call 3) and the new message's turn makes call 4.
    assert resumed.calls() == {0: 1, 1: 1, 2: 2, 3: 1, 4: 1}
    first, again = [r for r in resumed.child() if call_number(r) == 2]
    assert _messages(again) == _messages(first)
    assert resumed.runs == ["1", "2", "3"]  # no completed tool ran again
    assert resumed.output == "resumed with 3 results: " + " | ".join(resumed.tool_results())


async def test_with_cut_off_turn_abort_the_step_in_flight_is_lost_not_repeated(
    tmp_path: Path,
) -> None:
    resumed = await kill_and_resume(tmp_path, "tool", {"cut_off_turn": "abort"})
    assert resumed.ends == ["aborted", "completed"]  # turn 1 is not taken up again
    # The model: the 3 completed calls are not asked again; the one new call (3) is the
    # answer to the new message, and it carries the whole history.
    assert resumed.calls() == {0: 1, 1: 1, 2: 1, 3: 1}
    # The tools: the 2 completed runs are not run again, nor is the one in flight.
    assert resumed.runs == ["1", "2", "3"]
    # What the model is told of the third call: interrupted (its result was lost).
    results = resumed.tool_results()
    assert len(results) == 3
    assert results[2] == INTERRUPTED
    assert resumed.output is not None
    assert resumed.output.startswith("resumed with 3 results: ")
