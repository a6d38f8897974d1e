"""Tool calls on the tape (format 2): recorded through the proxy's tool route by the
core's client (:class:`dsh.core.tapes.ToolTape`), checked or answered on replay, a
changed call is a divergence, resume answers what the tape holds and records the rest;
a version 1 tape still replays."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsh.core import ToolResult
from dsh.core.tapes import ToolTape
from dsh.tape import TapeProxy, read_tape

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

ARGS = {"path": "a.txt"}


async def _record(directory: Path) -> None:
    with TapeProxy(directory, "record") as proxy:
        tape = ToolTape(proxy.proxy_url)
        action, answer = await tape.before("conv1", 0, "read_file", ARGS)
        assert (action, answer) == ("record", None)
        await tape.after("conv1", 0, "read_file", ARGS, ToolResult("alpha\n", data={"n": 1}))
        await tape.after("conv1", 1, "shell", {"cmd": "ls"}, ToolResult("boom", is_error=True))
        assert tape.drain()  # recording only: results go out from a sender thread
    assert proxy.tools_recorded == 2


async def test_tool_calls_are_recorded_and_replayed(tmp_path: Path) -> None:
    await _record(tmp_path)
    tape = read_tape(tmp_path)
    assert tape.header["tape"] == 2
    assert [(t["kind"], t["name"], t["call"]) for t in tape.tools] == [
        ("tool", "read_file", 0),
        ("tool", "shell", 1),
    ]
    assert tape.tools[0]["result"] == {
        "content": [{"type": "text", "text": "alpha\n"}],
        "is_error": False,
        "data": {"n": 1},
    }
    # Replay: the call is checked against the tape and runs again.
    with TapeProxy(tmp_path, "replay") as proxy:
        action, answer = await ToolTape(proxy.proxy_url).before("conv1", 0, "read_file", ARGS)
        assert (action, answer) == ("run", None)
    assert proxy.divergence is None
    # --replay-tools: the recorded result, not run.
    with TapeProxy(tmp_path, "replay", replay_tools=True) as proxy:
        client = ToolTape(proxy.proxy_url)
        action, answer = await client.before("conv1", 0, "read_file", ARGS)
        assert action == "result"
        assert answer is not None
        assert answer.blocks() == [{"type": "text", "text": "alpha\n"}]
        assert answer.data == {"n": 1}
        assert not answer.is_error
        action, answer = await client.before("conv1", 1, "shell", {"cmd": "ls"})
        assert action == "result"
        assert answer is not None
        assert answer.is_error
    assert proxy.tools.remaining == 0


async def test_a_changed_tool_call_is_a_divergence_with_a_diff(tmp_path: Path) -> None:
    await _record(tmp_path)
    with TapeProxy(tmp_path, "replay") as proxy:
        action, answer = await ToolTape(proxy.proxy_url).before(
            "conv1", 0, "read_file", {"path": "b.txt"}
        )
    assert action == "diverged"
    assert answer is not None
    assert answer.is_error
    divergence = proxy.divergence
    assert divergence is not None
    assert (divergence.label, divergence.path, divergence.call) == ("tool", "read_file", 0)
    assert '-  "path": "a.txt"' in divergence.diff
    assert '+  "path": "b.txt"' in divergence.diff
    assert "tape divergence: tool read_file" in str(answer.content)


async def test_resume_answers_what_the_tape_holds_then_records(tmp_path: Path) -> None:
    await _record(tmp_path)
    with TapeProxy(tmp_path, "resume") as proxy:
        client = ToolTape(proxy.proxy_url)
        action, answer = await client.before("conv1", 0, "read_file", ARGS)
        assert action == "result"
        assert answer is not None
        action, answer = await client.before("conv1", 2, "read_file", {"path": "new"})
        assert (action, answer) == ("record", None)
        await client.after("conv1", 2, "read_file", {"path": "new"}, ToolResult("fresh"))
    assert proxy.divergence is None
    assert proxy.tools.answered == 1
    assert proxy.tools_recorded == 1
    tape = read_tape(tmp_path)  # both recordings: the first one's, then the resumed one's
    assert [t["call"] for t in tape.tools] == [0, 1, 2]
    headers = [
        json.loads(line)
        for line in (tmp_path / "tape.jsonl").read_text().splitlines()
        if "tape" in json.loads(line)
    ]
    assert [h.get("resumed", False) for h in headers] == [False, True]


async def test_a_version_1_tape_replays_and_runs_its_tools(tmp_path: Path) -> None:
    (tmp_path / "tape.jsonl").write_text(json.dumps({"tape": 1, "created": "x"}) + "\n")
    with TapeProxy(tmp_path, "replay", replay_tools=True) as proxy:
        action, answer = await ToolTape(proxy.proxy_url).before("c", 0, "read_file", ARGS)
    assert (action, answer) == ("run", None)
    assert proxy.divergence is None


async def test_without_a_proxy_the_call_is_refused_not_run(tmp_path: Path) -> None:
    with TapeProxy(tmp_path, "record") as proxy:
        url = proxy.proxy_url
    action, answer = await ToolTape(url).before("c", 0, "read_file", ARGS)
    assert action == "diverged"
    assert answer is not None
    assert answer.is_error
