"""One rule picks the model of a preset without ``[agent.model]``, in ``dsh run``, in
``dsh acp`` and in Python (``Context.open``): the environment's (``dsh.core.
model_from_env``). The README's Python sample runs verbatim, as a real process, on the
``dsh.toml`` that ``dsh init`` writes and in a folder without one; ``dsh acp`` without
any model tells the editor's user to set the ``env`` block of the agent server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from acp import PROTOCOL_VERSION, Client, RequestError

from dsh.testing.docs import extract_blocks
from dsh.testing.fixtures import dsh_acp_child
from dsh.testing.model_servers import ChatReply, OpenAIChatServer

pytestmark = pytest.mark.timeout(90)

README = Path(__file__).resolve().parents[4] / "README.md"
KEY = "sk-test-key-321"
ANSWER = "README.md describes dsh, subagents for Python agents."

RUN_SAMPLE = """\
import ast, asyncio, sys
source = open(sys.argv[1], encoding="utf-8").read()
code = compile(source, sys.argv[1], "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
asyncio.run(eval(code, {"__name__": "__main__"}))
"""


def clean_env(**extra: str) -> dict[str, str]:
    drop = ("OPENAI_", "DEEPSEEK_", "ANTHROPIC_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(extra)
    return env


def readme_sample() -> str:
    """The README's Python sample (top-level await, as ``python -m asyncio`` runs it)."""
    found = [b.code for b in extract_blocks(README, ["python"]) if "Context.open(" in b.code]
    assert found, "README.md has no Python sample that opens a context"
    return found[0]


def run_python(code: str, folder: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    (folder / "sample.py").write_text(code, encoding="utf-8")
    return subprocess.run(
        [sys.executable, "-c", RUN_SAMPLE, "sample.py"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def test_the_readme_sample_runs_verbatim_with_the_dsh_init_file_and_without_one(
    tmp_path: Path,
) -> None:
    initialised, bare = tmp_path / "initialised", tmp_path / "bare"
    initialised.mkdir()
    bare.mkdir()
    with OpenAIChatServer(default=ChatReply(text=ANSWER), api_key=KEY) as srv:
        env = clean_env(OPENAI_BASE_URL=srv.api_base, OPENAI_API_KEY=KEY)
        init = subprocess.run(
            [sys.executable, "-m", "dsh.cli", "init"],
            cwd=initialised,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert init.returncode == 0, init.stderr
        for folder in (initialised, bare):
            done = run_python(readme_sample(), folder, env)
            assert done.returncode == 0, done.stderr
            assert done.stdout == f"completed {ANSWER}\n"
        requests = srv.requests
    assert len(requests) == 2  # the spawned child's one model call, in each folder
    assert all(r.header("authorization") == f"Bearer {KEY}" for r in requests)
    assert {r.json["model"] for r in requests} == {"gpt-4o-mini"}


def test_load_preset_of_the_dsh_init_file_takes_the_model_from_the_environment(
    tmp_path: Path,
) -> None:
    """The issue's case: ``Context.open(load_preset("dsh.toml"))`` on ``dsh init``'s file
    raised ``ConfigError: no model is configured``."""
    code = (
        "from dsh.core import Context, last_output, load_preset\n"
        'async with Context.open(load_preset("dsh.toml")) as ctx:\n'
        "    agent = ctx.agents.create()\n"
        '    outcome = await agent.run("hi")\n'
        "    print(outcome.stop_reason, last_output(agent.session.events))\n"
    )
    with OpenAIChatServer(default=ChatReply(text=ANSWER)) as srv:
        env = clean_env(DEEPSEEK_API_KEY="sk-unused", OPENAI_BASE_URL=srv.api_base)
        subprocess.run([sys.executable, "-m", "dsh.cli", "init"], cwd=tmp_path, env=env, check=True)
        done = run_python(code, tmp_path, env)
        requests = srv.requests
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"completed {ANSWER}\n"
    assert len(requests) == 1
    assert requests[0].header("authorization") is None  # OPENAI_BASE_URL without a key


class _Client(Client):
    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        return None

    async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("nothing asks in this test")


@pytest.mark.anyio
async def test_dsh_acp_without_a_model_tells_the_editor_user_to_set_the_env_block(
    tmp_path: Path,
) -> None:
    stderr = tmp_path / "dsh-acp.stderr"
    with stderr.open("wb") as errors:
        async with dsh_acp_child(
            _Client(), "--preset", "standard", cwd=tmp_path, env=clean_env(), stderr=errors
        ) as (conn, process):
            with anyio.fail_after(60):
                await conn.initialize(protocol_version=PROTOCOL_VERSION)
                with pytest.raises(RequestError) as info:
                    await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
    assert process.returncode == 0, stderr.read_text()
    message = str(info.value)
    assert "dsh acp cannot start a session: no model is configured" in message
    assert "`env` block in the editor's settings" in message
    assert '"agent_servers"' in message  # where Zed keeps it
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "DEEPSEEK_API_KEY", "[agent.model]"):
        assert name in message
    assert "docs/zed.md" in message
    assert info.value.data == {"details": message.split("dsh acp cannot start a session: ")[1]}
    # The same on stderr, with the preset it read.
    logged = stderr.read_text()
    assert "presets/standard.toml: no model is configured. Give the agent server" in logged
