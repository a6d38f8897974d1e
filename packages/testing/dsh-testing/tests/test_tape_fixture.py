"""The ``tape`` fixture, in pytest sessions of a temporary project: a session with
``--record-tapes`` records against a fake server, a plain session replays with no
server (a test whose request holds its ``tmp_path`` too), a changed request fails with
the difference, a missing tape says how to record it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from dsh.testing.processes import run_cli

pytestmark = pytest.mark.timeout(120)

PROJECT_TESTS = """\
import contextlib
import json
import os
import subprocess
import sys

import httpx

from dsh.testing.model_servers import ChatReply, OpenAIChatServer

# A child process finds the tape by DSH_TAPE_PROXY, as a codex or claude-code provider does.
CHILD = '''
import json, os, sys, httpx
from dsh.subagent.kit import taped_url
base = taped_url(os.environ.get("UPSTREAM") or "http://127.0.0.1:9/gone", "child")
reply = httpx.post(base + "/chat/completions", json=json.loads(sys.argv[1]))
print("CHILD", reply.status_code, reply.json()["choices"][0]["message"]["content"])
'''


def test_hello(tape):
    with contextlib.ExitStack() as stack:
        upstreams = {}
        if tape.recording:
            server = stack.enter_context(OpenAIChatServer(default=ChatReply(text="hello tape")))
            upstreams["openai"] = server.api_base
            os.environ["UPSTREAM"] = server.api_base
        proxy = tape(os.environ.get("TAPE_NAME", "hello"), **upstreams)
        assert os.environ["DSH_TAPE_PROXY"] == proxy.proxy_url
        request = {"model": "m", "messages": [{"role": "user", "content": os.environ["PROMPT"]}]}
        reply = httpx.post(proxy.base_url("openai") + "/chat/completions", json=request)
        assert reply.status_code == 200, reply.text
        print("ANSWER", reply.json()["choices"][0]["message"]["content"])
        request["model"] = "child"
        child = [sys.executable, "-c", CHILD, json.dumps(request)]
        done = subprocess.run(child, capture_output=True, text=True, timeout=30)
        print(done.stdout, done.stderr)


def test_in_tmp_path(tape, tmp_path):
    # The test's tmp_path differs in every session: the default normalisation makes it
    # <TMP> on the tape, and this session's folder again in the replayed answer.
    def echo(request):
        return ChatReply(text="seen " + request.json["messages"][-1]["content"])

    with contextlib.ExitStack() as stack:
        upstreams = {}
        if tape.recording:
            server = stack.enter_context(OpenAIChatServer(default=echo))
            upstreams["openai"] = server.api_base
        proxy = tape("in-tmp", **upstreams)
        request = {"model": "m", "messages": [{"role": "user", "content": f"look in {tmp_path}"}]}
        reply = httpx.post(proxy.base_url("openai") + "/chat/completions", json=request)
        assert reply.status_code == 200, reply.text
        assert reply.json()["choices"][0]["message"]["content"] == f"seen look in {tmp_path}"
"""


def session(project: Path, *args: str, prompt: str = "hi", name: str = "hello") -> str:
    """One pytest session in ``project``: its output (stdout and stderr)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "DSH_TAPE"))}
    env.update(PROMPT=prompt, TAPE_NAME=name)
    plugins = ["-p", "dsh.testing.pytest_plugin", "-p", "no:cacheprovider"]
    options = ["-s", "-q", "--rootdir", str(project), *args]
    done = run_cli(
        "pytest", [*plugins, *options, "test_model.py"], cwd=project, env=env, timeout=100
    )
    return f"exit {done.returncode}\n{done.stdout}{done.stderr}"


def test_a_tape_recorded_in_one_session_replays_in_the_next(tmp_path: Path) -> None:
    (tmp_path / "test_model.py").write_text(PROJECT_TESTS)

    recorded = session(tmp_path, "--record-tapes")
    assert recorded.startswith("exit 0"), recorded
    assert "ANSWER hello tape" in recorded
    tape_file = tmp_path / "tapes" / "hello" / "tape.jsonl"
    lines = [json.loads(line) for line in tape_file.read_text().splitlines()]
    assert [line.get("label") for line in lines] == [None, "openai", "child"]
    assert "CHILD 200 hello tape" in recorded
    in_tmp = (tmp_path / "tapes" / "in-tmp" / "tape.jsonl").read_text()
    assert "look in <TMP>" in in_tmp
    assert "seen look in <TMP>" in in_tmp
    assert "pytest-of" not in in_tmp

    replayed = session(tmp_path)  # no server runs: the tape answers
    assert replayed.startswith("exit 0"), replayed  # test_in_tmp_path too, in another folder
    assert "ANSWER hello tape" in replayed
    assert "CHILD 200 hello tape" in replayed  # the child, through DSH_TAPE_PROXY

    changed = session(tmp_path, prompt="hello?")
    assert changed.startswith("exit 1"), changed
    assert "tape divergence: openai /chat/completions" in changed
    assert '-   "content": "hi"' in changed
    assert '+   "content": "hello?"' in changed
    assert "--record-tapes test_model.py::test_hello" in changed

    missing = session(tmp_path, name="never-recorded")
    assert missing.startswith("exit 1"), missing
    assert "no tape 'never-recorded'" in missing
    assert "record it with `pytest --record-tapes test_model.py::test_hello`" in missing

    again = session(tmp_path, "--record-tapes")  # re-recording replaces the tape
    assert again.startswith("exit 0"), again
    assert len(tape_file.read_text().splitlines()) == 3
