"""``workspace = "shared"`` (issue 26): the parent serves a child agent's ``fs/*`` and
``terminal/*`` with its own file and shell tools, under its permissions and sandbox;
every served request is a progress item; no terminal outlives the run.

The child is ``workspace_agent.py``, a scripted ACP agent over real stdio: each prompt
is the list of requests it sends to its client (see its docstring)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import ValidationError

from dsh.core import PermissionDecision, PermissionRequest
from dsh.subagent import SubagentProgress
from dsh.subagent_acp import AcpProvider, AcpProviderConfig
from dsh.testing.fixtures import ProviderRig, plugin_rows, progress_and_result
from dsh.testing.processes import cmdline, live_children, process_tree, run_cli, wait_until_gone

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

AGENT = str(Path(__file__).with_name("workspace_agent.py"))
TOOLS = plugin_rows("dsh-tool-fs", "dsh-tool-shell")
ALLOWED = '\n[permissions.tools]\nwrite_file = "allow"\nshell = "allow"\n'


def shared(**fields: Any) -> AcpProviderConfig:
    """A row that runs the workspace agent with a shared workspace."""
    fields.setdefault("name", "acp-ws")
    fields.setdefault("workspace", "shared")
    return AcpProviderConfig(command=sys.executable, args=[AGENT], **fields)


class Rig(ProviderRig):
    """Runs a list of requests through the workspace agent."""

    async def steps(
        self, *steps: tuple[str, dict[str, Any]], config: AcpProviderConfig | None = None
    ) -> tuple[list[dict[str, Any]], list[SubagentProgress]]:
        """The agent's answer per step, and the run's progress items."""
        config = config or shared()
        if self.runtime.get_provider(config.name) is None:
            self.runtime.register_provider(AcpProvider(config))
        run = await self.start_on(config.name, json.dumps([list(step) for step in steps]))
        items, result = await progress_and_result(run)
        assert result.stop_reason == "completed", result.diagnostic
        answers: list[dict[str, Any]] = json.loads(result.output)
        return answers, items


@asynccontextmanager
async def rig_in(tmp_path: Path, extra: str = ALLOWED, tools: str = TOOLS) -> AsyncIterator[Rig]:
    """A rig whose parent has the file and shell tools (``extra``: more preset)."""
    async with Rig.scripted(tmp_path, plugins=tools + extra) as made:
        yield made


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    """File and shell tools, their writes and commands allowed."""
    async with rig_in(tmp_path) as made:
        yield made


def tool_items(items: list[SubagentProgress]) -> list[tuple[str, str | None, str | None]]:
    """The served requests' items: (kind, title or status, call id)."""
    return [
        (i.kind, i.title if i.kind == "tool_call" else i.status, i.tool_call_id)
        for i in items
        if i.kind in ("tool_call", "tool_update")
    ]


async def test_the_client_offers_fs_and_terminal_only_when_shared(rig: Rig) -> None:
    answers, _ = await rig.steps(("caps", {}))
    caps = answers[0]["ok"]
    assert caps["fs"] == {"readTextFile": True, "writeTextFile": True}
    assert caps["terminal"] is True
    answers, _ = await rig.steps(("caps", {}), config=shared(name="acp-own", workspace="own"))
    caps = answers[0]["ok"]
    assert caps["fs"] == {"readTextFile": False, "writeTextFile": False}
    assert caps["terminal"] is False
    answers, _ = await rig.steps(
        ("read", {"path": "/etc/hostname"}), config=shared(name="acp-own2", workspace="own")
    )
    assert answers[0]["error"]["code"] == -32601  # not served by a row that does not share


def test_an_unknown_workspace_is_refused_naming_the_value_and_the_fix() -> None:
    with pytest.raises(ValidationError) as caught:
        shared(workspace="parent")
    text = str(caught.value)
    assert "workspace = 'parent' is not a workspace" in text
    assert '"own"' in text
    assert '"shared"' in text


async def test_reads_and_writes_go_through_the_parents_tools(rig: Rig, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("one\ntwo\nthree\n", encoding="utf-8")
    notes = str(tmp_path / "notes.txt")
    answers, items = await rig.steps(
        ("read", {"path": notes}),
        ("read", {"path": notes, "line": 2, "limit": 1}),
        ("write", {"path": notes, "content": "one\nTWO\nthree\n"}),
        ("write", {"path": str(tmp_path / "new" / "made.txt"), "content": "made"}),
        ("read", {"path": "/etc/hostname"}),  # outside the parent's working directory
    )
    assert answers[0] == {"ok": {"content": "one\ntwo\nthree\n"}}  # exact: last newline kept
    assert answers[1] == {"ok": {"content": "two\n"}}
    assert answers[2] == {"ok": {}}
    assert answers[3] == {"ok": {}}
    assert (tmp_path / "notes.txt").read_text(encoding="utf-8") == "one\nTWO\nthree\n"
    assert (tmp_path / "new" / "made.txt").read_text(encoding="utf-8") == "made"
    assert answers[4]["error"]["code"] == -32603
    assert "outside" in answers[4]["error"]["message"]
    served = tool_items(items)
    titles = [title for kind, title, _ in served if kind == "tool_call"]
    assert titles == [
        f"Read {notes}",
        f"Read {notes}",
        f"Write {notes}",
        f"Write {tmp_path / 'new' / 'made.txt'}",
        "Read /etc/hostname",
    ]
    statuses = [status for kind, status, _ in served if kind == "tool_update"]
    assert statuses == ["completed", "completed", "completed", "completed", "failed"]
    ids = [call_id for _, _, call_id in served]
    assert len(set(ids)) == 5  # each call and its update share an id
    assert all(ids)


async def test_a_large_file_is_read_whole_across_the_tools_caps(tmp_path: Path) -> None:
    caps = plugin_rows(("dsh-tool-fs", {"max_read_lines": 3, "max_read_bytes": 1024}))
    text = "".join(f"line {n}\n" for n in range(1, 11))
    (tmp_path / "big.txt").write_text(text, encoding="utf-8")
    async with rig_in(tmp_path, tools=caps) as rig:
        answers, _ = await rig.steps(
            ("read", {"path": str(tmp_path / "big.txt")}),
            ("read", {"path": str(tmp_path / "big.txt"), "line": 4, "limit": 5}),
        )
    assert answers[0] == {"ok": {"content": text}}
    assert answers[1] == {"ok": {"content": "".join(f"line {n}\n" for n in range(4, 9))}}


async def test_a_protected_path_is_refused(rig: Rig, tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").write_text("[core]\n", encoding="utf-8")
    answers, _ = await rig.steps(
        ("write", {"path": str(tmp_path / ".git" / "config"), "content": "hacked"})
    )
    assert answers[0]["error"]["code"] == -32603
    assert "protected" in answers[0]["error"]["message"]
    assert (tmp_path / ".git" / "config").read_text(encoding="utf-8") == "[core]\n"


async def test_ask_goes_to_the_parents_approver_and_a_reject_blocks_the_write(
    tmp_path: Path,
) -> None:
    asked: list[PermissionRequest] = []

    async def reject(request: PermissionRequest) -> PermissionDecision:
        asked.append(request)
        return PermissionDecision(False, "the user said no")

    target = tmp_path / "keep.txt"
    target.write_text("original", encoding="utf-8")
    async with rig_in(tmp_path, extra="") as rig:  # write_file and shell: "ask"
        rig.ctx.permissions.set_approver(reject, agent=rig.parent)
        answers, items = await rig.steps(
            ("write", {"path": str(target), "content": "changed"}),
            ("create", {"command": "touch", "args": [str(tmp_path / "ran")]}),
        )
    assert [(r.tool, r.title) for r in asked] == [
        ("write_file", f"Write {target}"),
        ("shell", f"Run `touch {tmp_path / 'ran'}`"),
    ]
    assert "the user said no" in answers[0]["error"]["message"]
    assert "the user said no" in answers[1]["error"]["message"]
    assert target.read_text(encoding="utf-8") == "original"
    assert not (tmp_path / "ran").exists()
    statuses = [status for kind, status, _ in tool_items(items) if kind == "tool_update"]
    assert statuses == ["failed", "failed"]


async def test_unattended_ask_is_refused(tmp_path: Path) -> None:
    async with rig_in(tmp_path, extra="") as rig:
        answers, _ = await rig.steps(("write", {"path": str(tmp_path / "x"), "content": "x"}))
    assert "nobody can answer" in answers[0]["error"]["message"]
    assert not (tmp_path / "x").exists()


async def test_a_parent_without_the_tools_refuses_saying_so(tmp_path: Path) -> None:
    async with rig_in(tmp_path, extra="", tools="") as rig:
        answers, _ = await rig.steps(
            ("read", {"path": str(tmp_path / "x")}),
            ("create", {"command": "true"}),
        )
    assert answers[0]["error"]["code"] == -32601
    assert "the parent agent has no tool 'read_file'" in answers[0]["error"]["message"]
    assert "the parent agent has no tool 'shell'" in answers[1]["error"]["message"]


async def test_a_read_only_row_refuses_writes_and_terminals(rig: Rig, tmp_path: Path) -> None:
    config = shared(name="acp-ro", sandbox={"mode": "read-only"})
    answers, _ = await rig.steps(
        ("write", {"path": str(tmp_path / "x"), "content": "x"}),
        ("create", {"command": "true"}),
        config=config,
    )
    assert all("read-only" in a["error"]["message"] for a in answers)
    assert not (tmp_path / "x").exists()


async def test_terminals_run_through_the_shell_tool(rig: Rig, tmp_path: Path) -> None:
    answers, items = await rig.steps(
        (
            "create",
            {
                "command": "printf 'hello\\n'; echo $GREETING > greeted; exit 3",
                "env": {"GREETING": "hi"},
            },
        ),
        ("wait", {}),
        ("output", {}),
        ("release", {}),
        ("create", {"command": "printf", "args": ["abcdefghij"], "outputByteLimit": 4}),
        ("wait", {}),
        ("output", {}),
        ("output", {"terminalId": "nope"}),
        ("create", {"command": "true", "cwd": "relative/dir"}),
    )
    assert answers[1] == {"ok": {"exitCode": 3}}
    assert answers[2] == {
        "ok": {"output": "hello\n", "truncated": False, "exitStatus": {"exitCode": 3}}
    }
    assert answers[3] == {"ok": {}}
    assert (tmp_path / "greeted").read_text(encoding="utf-8") == "hi\n"
    assert answers[6]["ok"]["output"] == "ghij"
    assert answers[6]["ok"]["truncated"] is True
    assert answers[7]["error"]["code"] == -32602
    assert answers[8]["error"]["code"] == -32602  # a cwd must be absolute
    served = tool_items(items)
    first = next(t for k, t, _ in served if k == "tool_call")
    assert first is not None
    assert first.startswith("Run `printf 'hello")
    assert ("tool_update", "failed") in [(k, s) for k, s, _ in served]  # exit status 3


def _marked(marker: str) -> set[int]:
    """Live processes (children of the test, and theirs) whose command line has ``marker``."""
    return {pid for pid in process_tree(live_children()) if marker in cmdline(pid)}


async def _until(condition: Callable[[], Awaitable[bool]], within: float) -> None:
    with anyio.fail_after(within):
        while not await condition():
            await anyio.sleep(0.05)


async def test_no_terminal_outlives_the_run(rig: Rig) -> None:
    marker = "47.125"  # an unusual sleep: its command line identifies it
    config = shared()
    rig.runtime.register_provider(AcpProvider(config))
    steps = [["create", {"command": f"sleep {marker}"}], ["output", {}]]
    run = await rig.start_on(config.name, json.dumps(steps))
    async with run:
        with anyio.fail_after(30):
            result = await run.result  # the turn ends; the terminal was never released
        assert result.stop_reason == "completed", result.diagnostic
        answers = json.loads(result.output)
        assert "terminalId" in answers[0]["ok"]
        assert answers[1]["ok"]["truncated"] is False
    # the run closed when it settled: its terminal was stopped with it
    await anyio.to_thread.run_sync(wait_until_gone, _marked(marker), 10)
    assert not _marked(marker)


async def test_a_terminal_dies_when_the_run_is_disposed_mid_turn(rig: Rig) -> None:
    marker = "53.375"
    config = shared(name="acp-ws-dispose")
    rig.runtime.register_provider(AcpProvider(config))
    steps = [["create", {"command": f"sleep {marker}"}], ["wait", {}]]  # waits forever
    run = await rig.start_on(config.name, json.dumps(steps))
    async with run:

        async def started() -> bool:
            return bool(_marked(marker))

        await _until(started, within=30)
    await anyio.to_thread.run_sync(wait_until_gone, _marked(marker), 10)
    assert not _marked(marker)


async def test_a_pooled_agent_serves_each_run_and_keeps_no_terminal(
    rig: Rig, tmp_path: Path
) -> None:
    marker = "41.625"
    config = shared(name="acp-ws-pool", pool={"size": 1})
    for n in (1, 2):
        answers, items = await rig.steps(
            ("caps", {}),
            ("create", {"command": f"sleep {marker}"}),
            ("write", {"path": str(tmp_path / f"run{n}.txt"), "content": f"run {n}"}),
            config=config,
        )
        assert answers[0]["ok"]["terminal"] is True  # offered to the warm process too
        assert (tmp_path / f"run{n}.txt").read_text(encoding="utf-8") == f"run {n}"
        assert [k for k, _, _ in tool_items(items)].count("tool_call") == 2
        await anyio.to_thread.run_sync(wait_until_gone, _marked(marker), 10)
        assert not _marked(marker)  # the run's terminal went with the run, not the process


async def test_a_terminal_dies_with_a_parent_that_is_sigkilled(tmp_path: Path) -> None:
    """A separate parent process (``python -m dsh.testing.faults parent``) serves the
    agent's terminal; SIGKILL it and the terminal's command goes too (the watchdog)."""
    marker = "59.875"
    steps = [["create", {"command": f"sleep {marker}"}], ["wait", {}]]
    spec = {
        "preset": '[agent.model]\nadapter = "scripted"\n' + TOOLS + ALLOWED,
        "plugins": [["dsh-subagent-acp", shared().model_dump(mode="json")]],
        "setup": None,
        "cwd": str(tmp_path),
        "provider": "acp-ws",
        "prompt": json.dumps(steps),
        "agent_options": None,
    }
    spec_file = tmp_path / "parent.json"
    spec_file.write_text(json.dumps(spec), encoding="utf-8")
    parent = await anyio.open_process(
        [sys.executable, "-m", "dsh.testing.faults", "parent", str(spec_file)],
        stdin=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        async def started_in_the_parents_tree() -> bool:
            # (marked first, then the tree: the terminal's bwrap/sh/sleep chain may still
            # be forking, and a process born between the two reads is in the next pair)
            marked = _marked(marker)
            return bool(marked) and marked <= process_tree([parent.pid])

        # the terminal is the parent's descendant (waited for, not sampled once)
        await _until(started_in_the_parents_tree, within=60)
        tree = process_tree([parent.pid])
        parent.kill()
        await parent.wait()
        await anyio.to_thread.run_sync(wait_until_gone, tree - {parent.pid}, 15)
        assert not _marked(marker)
    finally:
        if parent.returncode is None:
            parent.kill()
            await parent.wait()
        await parent.aclose()


CLI_PRESET = """
[agent.model]
adapter = "scripted"
[[agent.model.options.replies]]
[[agent.model.options.replies.tool_calls]]
name = "subagent_acp"
arguments = {{ description = "ws child", prompt = {prompt} }}
[[agent.model.options.replies]]
text = "lead done"
{tools}
[[plugin]]
name = "dsh-subagent-acp"
config = {{ name = "acp-ws", command = {python}, args = [{agent}], workspace = "shared" }}

[[plugin]]
name = "dsh-tool-subagent"
config = {{ provider = "acp-ws", tool_name = "subagent_acp", max_depth = "provider-managed" }}
{allowed}"""


def test_served_requests_are_in_dsh_run_json(tmp_path: Path) -> None:
    """End to end: ``dsh run --json`` shows the child's served write as progress items."""
    target = tmp_path / "from-child.txt"
    steps = [["write", {"path": str(target), "content": "child wrote this"}]]
    preset = tmp_path / "lead.toml"
    preset.write_text(
        CLI_PRESET.format(
            prompt=json.dumps(json.dumps(steps)),
            tools=TOOLS,
            python=json.dumps(sys.executable),
            agent=json.dumps(AGENT),
            allowed=ALLOWED,
        ),
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DSH_", "OPENAI_"))}
    done = run_cli(
        "dsh.cli",
        ["run", "--json", "--preset", str(preset), "go"],
        cwd=tmp_path,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    events = [json.loads(line) for line in done.stdout.splitlines()]
    items = [e["item"] for e in events if e["type"] == "subagent/progress"]
    calls = [i for i in items if i["kind"] == "tool_call"]
    assert [(c["name"], c["title"]) for c in calls] == [("edit", f"Write {target}")]
    updates = [i for i in items if i["kind"] == "tool_update"]
    assert [(u["tool_call_id"], u["status"]) for u in updates] == [
        (calls[0]["tool_call_id"], "completed")
    ]
    assert target.read_text(encoding="utf-8") == "child wrote this"
    assert events[-2]["type"] == "answer"
    assert events[-2]["text"] == "lead done"
