"""The tape in the proxy's own process: a model's HTTP calls through
:meth:`TapeProxy.transport` and tool calls through :meth:`TapeProxy.tool_tape` write
the lines the proxy's routes write, replay with the server stopped, diverge with the
same diff; ``Context.open(record=...)`` and :func:`dsh.tape.attach` use them (no
connection to the proxy); a child process recording through the proxy while the
parent records in process makes one tape that replays."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from dsh.core import Context, ToolResult, last_output, parse_preset, tool
from dsh.core.tapes import TAPE_PROXY_VARIABLE, ToolTape
from dsh.tape import TapeProxy, attach, read_tape
from dsh.testing.model_servers import ChatReply, ChatToolCall, OpenAIChatServer, RecordedRequest

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

KEY = "sk-in-process-secret-0123456789abcdef"


def chat(text: str, *, stream: bool = True) -> dict[str, Any]:
    return {
        "model": "gpt-test",
        "stream": stream,
        "messages": [{"role": "system", "content": "Be terse."}, {"role": "user", "content": text}],
    }


BODIES = [chat("one"), chat("two", stream=False), chat("one")]


def _lines(directory: Path) -> list[dict[str, Any]]:
    """The tape's lines, with what differs between two runs of a fake server masked."""
    out = []
    for line in (directory / "tape.jsonl").read_text().splitlines():
        entry = json.loads(line)
        entry.pop("created", None)
        if "body" in entry:
            entry["body"] = re.sub(r'"created": ?\d+', '"created": 0', entry["body"])
        out.append(entry)
    return out


async def _send_all(client: httpx.AsyncClient, base: str, headers: dict[str, str]) -> list[Any]:
    answers = []
    for body in BODIES:
        async with client.stream(
            "POST", base + "/chat/completions", json=body, headers=headers
        ) as r:
            answers.append((r.status_code, r.headers["content-type"], await r.aread()))
    return answers


async def test_the_transport_writes_the_proxy_s_lines_and_replays_them(tmp_path: Path) -> None:
    auth = {"authorization": f"Bearer {KEY}"}
    answers = {}
    for way in ("proxy", "transport"):
        with OpenAIChatServer(default=ChatReply(text="hello there"), api_key=KEY) as server:
            with TapeProxy(tmp_path / way, "record", {"openai": server.api_base}) as proxy:
                base = proxy.base_url("openai")
                if way == "proxy":
                    async with httpx.AsyncClient() as client:
                        answers[way] = await _send_all(client, base, auth)
                        # a refused request is an exchange too
                        answers[way].append(
                            (await client.post(base + "/chat/completions")).status_code
                        )
                else:
                    async with httpx.AsyncClient(transport=proxy.transport("openai")) as client:
                        answers[way] = await _send_all(client, base, auth)
                        answers[way].append(
                            (await client.post(base + "/chat/completions")).status_code
                        )
                    assert proxy.accepted == 0  # never a connection to the proxy
            assert len(server.requests) == 4
            assert server.requests[0].header("authorization") == f"Bearer {KEY}"
    statuses = [a if isinstance(a, int) else a[0] for a in answers["transport"]]
    assert statuses == [200, 200, 200, 401]
    assert answers["transport"][0][1].startswith("text/event-stream")
    assert answers["transport"][1][1].startswith("application/json")
    assert _lines(tmp_path / "transport") == _lines(tmp_path / "proxy")
    assert KEY not in (tmp_path / "transport" / "tape.jsonl").read_text()

    # The server is gone: the transport answers from the tape, bytes as recorded.
    recorded = answers["transport"]
    with TapeProxy(tmp_path / "transport", "replay") as proxy:
        async with httpx.AsyncClient(transport=proxy.transport("openai")) as client:
            base = proxy.base_url("openai")
            changed = await client.post(base + "/chat/completions", json=chat("three"))
            replayed = await _send_all(client, base, {})
        assert proxy.accepted == 0
    assert replayed == recorded[:3]
    assert changed.status_code == 409
    assert proxy.divergence is not None
    assert proxy.divergence.closest_seq == 1
    assert '-   "content": "one",' in proxy.divergence.diff
    assert '+   "content": "three",' in proxy.divergence.diff
    assert changed.json()["error"]["message"] == proxy.divergence.describe()

    # the same divergence through the proxy's HTTP route
    with TapeProxy(tmp_path / "transport", "replay") as other:
        async with httpx.AsyncClient() as client:
            base = other.base_url("openai")
            over_http = await client.post(base + "/chat/completions", json=chat("three"))
    assert over_http.status_code == 409
    assert over_http.json() == changed.json()


async def test_resume_through_the_transport_answers_the_tape_then_goes_live(
    tmp_path: Path,
) -> None:
    with OpenAIChatServer(default=ChatReply(text="hi")) as server:
        with TapeProxy(tmp_path, "record", {"openai": server.api_base}) as proxy:
            async with httpx.AsyncClient(transport=proxy.transport("openai")) as client:
                await client.post(proxy.base_url("openai") + "/chat/completions", json=chat("a"))
        with TapeProxy(tmp_path, "resume", {"openai": server.api_base}) as proxy:
            async with httpx.AsyncClient(transport=proxy.transport("openai")) as client:
                for text in ("a", "b"):
                    r = await client.post(
                        proxy.base_url("openai") + "/chat/completions", json=chat(text)
                    )
                    assert r.status_code == 200
        assert len(server.requests) == 2  # "a" once (recorded), "b" live
    assert (proxy.replayed, proxy.recorded) == (1, 1)
    assert len(read_tape(tmp_path).exchanges) == 2


async def test_in_process_tool_calls_write_the_route_s_lines_without_a_thread(
    tmp_path: Path,
) -> None:
    calls = [
        ("conv1", 0, "read_file", {"path": "a.txt"}, ToolResult("alpha\n", data={"n": 1})),
        ("conv1", 1, "shell", {"cmd": f"echo {KEY}"}, ToolResult("boom", is_error=True)),
    ]
    for way in ("route", "http"):  # route first: the HTTP client leaves its sender thread
        with TapeProxy(tmp_path / way, "record") as proxy:
            tape = ToolTape(proxy.proxy_url) if way == "http" else proxy.tool_tape()
            for conversation, number, name, arguments, result in calls:
                assert await tape.before(conversation, number, name, arguments) == ("record", None)
                await tape.after(conversation, number, name, arguments, result)
            if way == "route":
                assert proxy.tools_recorded == 2  # written at once: nothing to drain
                assert not [t for t in threading.enumerate() if t.name == "dsh tool tape"]
            assert tape.drain()
        assert proxy.tools_recorded == 2
    assert _lines(tmp_path / "route") == _lines(tmp_path / "http")
    assert KEY not in (tmp_path / "route" / "tape.jsonl").read_text()

    with TapeProxy(tmp_path / "route", "replay", replay_tools=True) as proxy:
        tape = proxy.tool_tape()
        action, answer = await tape.before("conv1", 0, "read_file", {"path": "b.txt"})
        assert action == "diverged"
        assert answer is not None
        assert answer.is_error
        assert '-  "path": "a.txt"' in answer.blocks()[0]["text"]
        assert '+  "path": "b.txt"' in answer.blocks()[0]["text"]
        action, answer = await tape.before("conv1", 0, "read_file", {"path": "a.txt"})
        assert action == "result"
        assert answer is not None
        assert answer.blocks() == [{"type": "text", "text": "alpha\n"}]
        assert answer.data == {"n": 1}
    assert proxy.divergence is not None
    assert proxy.divergence.label == "tool"
    assert proxy.accepted == 0


class Count(BaseModel):
    n: int


def _preset(base_url: str) -> str:
    return f"""
[[plugin]]
name = "dsh-llm-openai"
[agent.model]
adapter = "openai"
model = "m-1"
options = {{ base_url = "{base_url}", api_key_env = "", pricing = "none" }}
"""


def count_then_answer(request: RecordedRequest) -> ChatReply:
    results = [m for m in request.json["messages"] if m["role"] == "tool"]
    if not results:
        return ChatReply(tool_calls=[ChatToolCall("count", {"n": 2})])
    return ChatReply(text=f"the tool said: {results[0]['content']}")


async def _run(ctx: Context, task: str, runs: list[int]) -> tuple[str, str | None]:
    @tool("count", "count to n")
    async def count(args: Count, tctx: object) -> ToolResult:
        runs.append(args.n)
        return ToolResult(f"counted to {args.n}")

    ctx.tools.register(count)
    agent = ctx.agents.create()
    outcome = await agent.run(task)
    return last_output(agent.session.events), outcome.error


async def test_context_record_is_in_process_and_replays_with_the_server_stopped(
    tmp_path: Path,
) -> None:
    runs: list[int] = []
    with OpenAIChatServer(default=count_then_answer) as server:
        preset = parse_preset(_preset(server.api_base))
        async with Context.open(preset, record=tmp_path) as ctx:
            recorded = await _run(ctx, "count please", runs)
        assert len(server.requests) == 2
    assert recorded == ("the tool said: counted to 2", None)
    tape = read_tape(tmp_path)
    assert [(e["call"], e["status"]) for e in tape.exchanges] == [(0, 200), (1, 200)]
    assert [(t["name"], t["arguments"]) for t in tape.tools] == [("count", {"n": 2})]
    assert [
        json.loads(x)["seq"] for x in (tmp_path / "tape.jsonl").read_text().splitlines()[1:]
    ] == [
        1,
        2,
        3,
    ]

    # The server is stopped: the same context, attached to a replaying proxy.
    with TapeProxy(tmp_path, "replay", replay_tools=True) as proxy:
        async with Context.open(preset) as ctx:
            attach(ctx, proxy)
            replayed = await _run(ctx, "count please", runs)
        assert (proxy.replayed, proxy.tools.answered, proxy.divergence) == (2, 1, None)
        assert proxy.accepted == 0  # no hop through the proxy
    assert replayed == recorded
    assert runs == [2]  # --replay-tools: the tool did not run again

    with TapeProxy(tmp_path, "replay") as proxy:
        async with Context.open(preset) as ctx:
            attach(ctx, proxy)
            _, error = await _run(ctx, "count twice please", runs)
    assert error is not None
    assert "HTTP 409" in error
    assert "tape divergence" in error
    assert proxy.divergence is not None
    assert '-   "content": "count please",' in proxy.divergence.diff
    assert '+   "content": "count twice please",' in proxy.divergence.diff


CHILD = r"""
import asyncio, json, os, sys
import httpx
from dsh.core import ToolResult
from dsh.core.tapes import ToolTape

async def main():
    base, body = sys.argv[1], json.loads(sys.argv[2])
    async with httpx.AsyncClient() as client:
        r = await client.post(base + "/chat/completions", json=body)
    tape = ToolTape.from_env()
    action, _ = await tape.before("child", 0, "read_file", {"path": "c.txt"})
    await tape.after("child", 0, "read_file", {"path": "c.txt"}, ToolResult("charlie"))
    assert tape.drain()
    print(json.dumps([r.status_code, r.text, action]))

asyncio.run(main())
"""


def _child(proxy: TapeProxy, body: dict[str, Any]) -> list[Any]:
    env = {**__import__("os").environ, TAPE_PROXY_VARIABLE: proxy.proxy_url}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, proxy.base_url("openai"), json.dumps(body)],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    answer: list[Any] = json.loads(done.stdout)
    return answer


async def test_a_child_process_and_the_parent_in_process_make_one_tape(tmp_path: Path) -> None:
    child_body = chat("child task")
    with (
        OpenAIChatServer(default=ChatReply(text="from the model")) as server,
        TapeProxy(tmp_path, "record", {"openai": server.api_base}) as proxy,
    ):
        tools = proxy.tool_tape()
        async with httpx.AsyncClient(transport=proxy.transport("openai")) as client:
            base = proxy.base_url("openai")
            parent = await client.post(base + "/chat/completions", json=chat("parent task"))
            child = _child(proxy, child_body)  # over HTTP, in another process
            await tools.after("parent", 0, "count", {"n": 1}, ToolResult("1"))
        assert proxy.accepted >= 1
    assert parent.status_code == 200
    assert child[0] == 200
    assert child[2] == "record"
    tape = read_tape(tmp_path)
    assert [e["request"]["messages"][1]["content"] for e in tape.exchanges] == [
        "parent task",
        "child task",
    ]
    assert sorted(t["conversation"] for t in tape.tools) == ["child", "parent"]
    seqs = [json.loads(x)["seq"] for x in (tmp_path / "tape.jsonl").read_text().splitlines()[1:]]
    assert sorted(seqs) == [1, 2, 3, 4]

    with TapeProxy(tmp_path, "replay", replay_tools=True) as proxy:
        async with httpx.AsyncClient(transport=proxy.transport("openai")) as client:
            again = await client.post(
                proxy.base_url("openai") + "/chat/completions", json=chat("parent task")
            )
        child_again = _child(proxy, child_body)
        action, answer = await proxy.tool_tape().before("parent", 0, "count", {"n": 1})
        assert proxy.divergence is None
        assert proxy.remaining == 0
    assert again.content == parent.content
    assert child_again[:2] == child[:2]
    assert child_again[2] == "result"
    assert action == "result"
    assert answer is not None
    assert answer.blocks()[0]["text"] == "1"


async def test_the_transport_normalises_as_the_proxy_does(tmp_path: Path) -> None:
    from dsh.tape import Normalisation

    def echo_path(request: RecordedRequest) -> ChatReply:
        return ChatReply(text=f"read {request.json['messages'][1]['content']}")

    with OpenAIChatServer(default=echo_path) as server:
        recording = Normalisation(values={"<TMP>": "/tmp/run-a"})
        with TapeProxy(
            tmp_path, "record", {"openai": server.api_base}, normalise=recording
        ) as proxy:
            async with httpx.AsyncClient(transport=proxy.transport("openai")) as client:
                base = proxy.base_url("openai")
                r = await client.post(
                    base + "/chat/completions", json=chat("/tmp/run-a/x.txt", stream=False)
                )
        assert r.json()["choices"][0]["message"]["content"] == "read /tmp/run-a/x.txt"
    (exchange,) = read_tape(tmp_path).exchanges
    assert exchange["request"]["messages"][1]["content"] == "<TMP>/x.txt"
    assert "/tmp/run-a" not in (tmp_path / "tape.jsonl").read_text()

    replaying = Normalisation(values={"<TMP>": "/tmp/run-b"})
    with TapeProxy(tmp_path, "replay", normalise=replaying) as proxy:
        async with httpx.AsyncClient(transport=proxy.transport("openai")) as client:
            base = proxy.base_url("openai")
            again = await client.post(
                base + "/chat/completions", json=chat("/tmp/run-b/x.txt", stream=False)
            )
    assert proxy.divergence is None
    assert again.json()["choices"][0]["message"]["content"] == "read /tmp/run-b/x.txt"
