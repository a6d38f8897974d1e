"""The agent process runs in its delegating agent's sandbox (issue 20): it cannot read
the parent's secrets through ``/proc``, a parent's narrower policy wins over the
child's own preset, a row cannot widen the preset's sandbox, and a warm pool is
never taken by a run whose parent has a narrower sandbox."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from dsh.core import AbortSignal, Context, parse_preset
from dsh.core.permissions import SandboxConfig, SandboxPolicy
from dsh.core.plugins import PluginError
from dsh.subagent import SubagentRuntime, SubagentStartRequest
from dsh.subagent_acp import AcpProvider, AcpProviderConfig

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

AGENT = str(Path(__file__).with_name("pool_agent.py"))
PARENT_SCRIPT = str(Path(__file__).with_name("sandbox_parent.py"))
SECRET_NAME = "DSH_TEST_PARENT_SECRET"
SECRET = "s3cret-of-the-parent-0f9c"

SHELL_CHILD = """
[[plugin]]
name = "dsh-tool-shell"

[sandbox]
mode = "off"

[agent.model]
adapter = "scripted"
[[agent.model.options.replies]]
tool_calls = [{{ name = "shell", arguments = {{ command = {command} }} }}]
[[agent.model.options.replies]]
text = "{{tool_results}}"
"""
"""A ``dsh acp`` child whose own preset turns its sandbox off and whose model runs
``command`` with the shell tool, then answers with the tool's output."""


def shell_child(tmp_path: Path, command: str) -> Path:
    preset = tmp_path / "child.toml"
    preset.write_text(SHELL_CHILD.format(command=json.dumps(command)), encoding="utf-8")
    return preset


def delegate_from_a_parent_process(
    tmp_path: Path, config: dict[str, Any], prompt: str, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    """Run ``prompt`` through an ``acp`` row in a real parent dsh process that holds
    :data:`SECRET` in its environment (as a parent holds its API keys)."""
    monkeypatch.setenv(SECRET_NAME, SECRET)  # the parent process inherits it
    done = subprocess.run(
        [sys.executable, PARENT_SCRIPT, str(tmp_path), json.dumps(config), prompt],
        capture_output=True,
        text=True,
        timeout=80,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answer: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return answer


def test_the_agent_process_cannot_read_the_parents_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = {"name": "acp", "command": sys.executable, "args": [AGENT]}
    answer = delegate_from_a_parent_process(tmp_path, config, f"snoop {SECRET_NAME}", monkeypatch)
    assert answer["stop"] == "completed", answer
    seen = json.loads(answer["output"])
    assert seen["found"] == []  # unsandboxed, the parent's /proc/<pid>/environ is readable
    assert seen["visible"] <= 3  # its own PID namespace: bubblewrap's init, itself


def test_the_tools_of_a_dsh_child_cannot_read_the_parents_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    command = f"grep -l {SECRET_NAME}= /proc/[0-9]*/environ 2>/dev/null; echo searched"
    preset = shell_child(tmp_path, command)
    args = ["-m", "dsh.cli", "acp", "--preset", str(preset)]
    config = {"name": "acp", "command": sys.executable, "args": args, "permission": "allow"}
    answer = delegate_from_a_parent_process(tmp_path, config, "look around", monkeypatch)
    assert answer["stop"] == "completed", answer
    assert "searched" in answer["output"], answer["output"]
    assert not re.search(r"/proc/\d+/environ", answer["output"]), answer["output"]
    assert SECRET not in answer["output"]


async def test_a_read_only_parent_wins_over_the_childs_own_preset(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    child = shell_child(tmp_path, "touch made_by_child.txt && echo wrote it")
    args = ["-m", "dsh.cli", "acp", "--preset", str(child)]
    config = AcpProviderConfig(name="acp", command=sys.executable, args=args, permission="allow")
    preset = parse_preset('[agent.model]\nadapter = "scripted"\n[sandbox]\nmode = "read-only"\n')
    async with Context.open(preset, cwd=work) as ctx:
        runtime = SubagentRuntime.of(ctx)
        runtime.register_provider(AcpProvider(config))
        request = SubagentStartRequest("write a file", ctx.agents.create(), AbortSignal())
        async with await runtime.start("acp", request) as run:
            with anyio.fail_after(60):
                result = await run.result
    assert result.stop_reason == "completed", result
    assert not (work / "made_by_child.txt").exists()
    assert "wrote it" not in result.output
    assert "Read-only file system" in result.output


async def test_a_row_that_asks_for_the_network_fails_the_load(tmp_path: Path) -> None:
    text = (
        '[agent.model]\nadapter = "scripted"\n'
        '[[plugin]]\nname = "dsh-subagent-acp"\n'
        f'config = {{ command = "{sys.executable}", sandbox = {{ network = true }} }}\n'
    )
    with pytest.raises(PluginError) as info:
        async with Context.open(parse_preset(text), cwd=tmp_path):
            pass
    message = str(info.value)
    assert 'preset row 1 (id "dsh-subagent-acp", plugin "dsh-subagent-acp")' in message
    assert 'the "acp" provider asks for network = true' in message
    assert "[sandbox]" in message  # where to allow it


async def test_a_row_may_narrow_the_sandbox_of_its_agent_process(tmp_path: Path) -> None:
    config = {"command": sys.executable, "args": [AGENT], "sandbox": {"mode": "read-only"}}
    async with Context.open(
        parse_preset('[agent.model]\nadapter = "scripted"\n'), cwd=tmp_path
    ) as ctx:
        await ctx.plugins.load("dsh-subagent-acp", config)
        request = SubagentStartRequest("who", ctx.agents.create(), AbortSignal())
        async with await SubagentRuntime.of(ctx).start("acp", request) as run:
            with anyio.fail_after(30):
                result = await run.result
    assert result.stop_reason == "completed", result
    policy = SandboxPolicy.from_json(json.loads(result.output)["sandbox"])
    assert (policy.mode, policy.network) == ("read-only", False)


async def test_a_warm_process_is_never_taken_by_a_parent_with_a_narrower_sandbox(
    tmp_path: Path,
) -> None:
    config = AcpProviderConfig(
        name="acp", command=sys.executable, args=[AGENT], pool={"size": 1, "idle_timeout": 0}
    )
    async with Context.open(
        parse_preset('[agent.model]\nadapter = "scripted"\n'), cwd=tmp_path
    ) as ctx:
        provider = AcpProvider(config)
        runtime = SubagentRuntime.of(ctx)
        runtime.register_provider(provider)
        pool = provider.pool(ctx)
        assert pool is not None
        await pool.wait_ready(timeout=30)

        async def who(parent: Any) -> dict[str, Any]:
            request = SubagentStartRequest("who", parent, AbortSignal())
            async with await runtime.start("acp", request) as run:
                with anyio.fail_after(30):
                    result = await run.result
            assert result.stop_reason == "completed", result
            facts: dict[str, Any] = json.loads(result.output)
            return facts

        parent = ctx.agents.create()
        narrow = ctx.agents.create(sandbox=SandboxConfig(mode="read-only"))
        first, second = await who(parent), await who(parent)
        assert first["instance"] == second["instance"]  # the warm process, twice
        narrowed = await who(narrow)
        assert narrowed["instance"] != first["instance"]  # a process of its own
        assert SandboxPolicy.from_json(narrowed["sandbox"]).mode == "read-only"
        assert SandboxPolicy.from_json(first["sandbox"]).mode == "workspace-write"
        assert pool.started == 1
        assert (await who(parent))["instance"] == first["instance"]  # still warm
