"""The real Gemini CLI (``gemini --acp``) under ``workspace = "shared"``, offline,
against the fake Gemini API (issue 26).

Gemini CLI 0.61.0 routes its edit tools' file access through the client when the client
offers ``fs`` (its ``AcpFileSystemService``): ``replace`` and ``write_file`` read the
file with ``fs/read_text_file`` and write it with ``fs/write_text_file``, so dsh serves
them with the parent's ``read_file`` / ``write_file``. Its ``read_file`` tool reads the
disk itself (it is handed the service and ignores it), and it never asks for a terminal:
``run_shell_command`` runs in its own process (in the row's sandbox). Two faults of the
CLI show here (docs/providers/acp.md, "The Gemini CLI"): it cannot create a file through
the client, and the model is told ``[object Object]`` instead of why a write was refused.

The CLI is found through env ``DSH_GEMINI_CLI`` (its ``bundle/gemini.js``), else
``<repo>/.tools/gemini-cli/bin/gemini.js`` (what ``tools/install-gemini-cli.sh``
installs). Missing, the tests skip locally and fail under ``CI=true``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import psutil  # type: ignore[import-untyped,unused-ignore]
import pytest

from dsh.core import PermissionDecision, PermissionRequest
from dsh.subagent import SubagentProgress, SubagentResult
from dsh.subagent_acp import AcpProvider, AcpProviderConfig
from dsh.testing.fixtures import ProviderRig, plugin_rows, scripted_context
from dsh.testing.model_servers import (
    GeminiCall,
    GeminiReply,
    GeminiServer,
    gemini_cli_env,
    reply_with_function_response,
)
from dsh.testing.model_servers.gemini import function_responses
from dsh.testing.processes import cmdline, live_children, node_entry, process_tree, wait_until_gone

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

REPO = Path(__file__).resolve().parents[4]
DEFAULT_ENTRY = REPO / ".tools" / "gemini-cli" / "bin" / "gemini.js"
TOOLS = plugin_rows("dsh-tool-fs", "dsh-tool-shell")
ALLOWED = '\n[permissions.tools]\nwrite_file = "allow"\nshell = "allow"\n'
ANSWER = "Gemini heard: {output}"


@pytest.fixture(scope="module")
def entry() -> str:
    """The Gemini CLI's entry point (run with ``node``), or a skip / CI failure."""
    return node_entry(
        "DSH_GEMINI_CLI",
        DEFAULT_ENTRY,
        "the Gemini CLI",
        "tools/install-gemini-cli.sh (npm installs the pinned @google/gemini-cli)",
    )


@pytest.fixture
def server() -> Iterator[GeminiServer]:
    """A fake Gemini API."""
    with GeminiServer() as srv:
        yield srv


class Rig(ProviderRig):
    """Runs prompts through the Gemini CLI, the parent holding the file and shell tools."""

    def __init__(self, ctx: Any, entry: str, server: GeminiServer, root: Path) -> None:
        super().__init__(ctx, ctx.agents.create())
        self.entry = entry
        self.server = server
        self.root = root

    def config(self, name: str, **fields: Any) -> AcpProviderConfig:
        """The CLI in ACP mode, offline, pointed at the fake server (its home under
        ``root/name``); ``fields`` go to the row (default: a shared workspace)."""
        env = gemini_cli_env(self.server.api_base, self.root / name)
        fields.setdefault("workspace", "shared")
        return AcpProviderConfig(
            name=name, command="node", args=[self.entry, "--acp"], env=env,
            turn_timeout=90, start_timeout=60, **fields,
        )  # fmt: skip

    async def run(self, config: AcpProviderConfig, prompt: str) -> Ran:
        """Run ``prompt``; the run is disposed of, and its processes gone, on return."""
        if self.runtime.get_provider(config.name) is None:
            self.runtime.register_provider(AcpProvider(config))
        run = await self.start_on(config.name, prompt)
        seen: dict[int, str] = {}
        items: list[SubagentProgress] = []
        async with run:
            with anyio.fail_after(100):
                async for item in run.progress():
                    items.append(item)
                    for pid in process_tree(self._agent_processes()):
                        seen.setdefault(pid, cmdline(pid))
            result = await run.result
        assert seen, "the Gemini CLI was never seen running"
        await anyio.to_thread.run_sync(wait_until_gone, set(seen), 15)
        assert not set(seen) & process_tree(live_children()), "a process outlived the run"
        return Ran(run.id, items, result, seen)

    def _agent_processes(self) -> set[int]:
        """Live descendants of this test whose command line names the CLI."""
        return {pid for pid in process_tree(live_children()) if self.entry in cmdline(pid)}


def running(marker: str) -> list[int]:
    """Every process on the machine (not only this test's) whose command line has
    ``marker``."""
    return [
        p.pid
        for p in psutil.process_iter(["cmdline"])
        if marker in " ".join(p.info["cmdline"] or ())
    ]


class Ran:
    """A finished run: its progress items and result."""

    def __init__(
        self,
        run_id: str,
        items: list[SubagentProgress],
        result: SubagentResult,
        processes: dict[int, str],
    ) -> None:
        self.run_id = run_id
        self.items = items
        self.result = result
        self.processes = processes
        """The agent's processes and their descendants seen while it ran (all gone
        since), with their command lines."""

    def served(self) -> list[tuple[str, str | None]]:
        """The requests dsh served (its own items, ids from the run's id): (title, how it
        ended), in order."""
        mine = [i for i in self.items if (i.tool_call_id or "").startswith(f"{self.run_id}-")]
        ends = {i.tool_call_id: i.status for i in mine if i.kind == "tool_update"}
        return [(i.title or "", ends.get(i.tool_call_id)) for i in mine if i.kind == "tool_call"]

    def failures(self) -> list[str]:
        """The texts of the failed served requests' updates (why they failed)."""
        return [
            i.text or ""
            for i in self.items
            if i.kind == "tool_update"
            and i.status == "failed"
            and (i.tool_call_id or "").startswith(f"{self.run_id}-")
        ]

    def agent_reported(self) -> set[str]:
        """The ids of the tool calls the agent itself reported (its own tools)."""
        return {
            i.tool_call_id
            for i in self.items
            if i.kind in ("tool_call", "tool_update")
            and i.tool_call_id
            and not i.tool_call_id.startswith(f"{self.run_id}-")
        }


@asynccontextmanager
async def rig_in(
    tmp_path: Path, entry: str, server: GeminiServer, extra: str = ALLOWED
) -> AsyncIterator[Rig]:
    """A rig whose parent has the file and shell tools (``extra``: more preset)."""
    async with scripted_context(tmp_path, plugins=TOOLS + extra) as ctx:
        yield Rig(ctx, entry, server, tmp_path / ".agents")


@pytest.fixture
async def rig(tmp_path: Path, entry: str, server: GeminiServer) -> AsyncIterator[Rig]:
    """File and shell tools, their writes and commands allowed."""
    async with rig_in(tmp_path, entry, server) as made:
        yield made


def replace(path: Path, old: str, new: str) -> GeminiCall:
    """The CLI's ``replace`` tool (its edit): one occurrence of ``old`` becomes ``new``."""
    return GeminiCall(
        "replace",
        {"file_path": str(path), "old_string": old, "new_string": new, "instruction": "edit"},
    )


def write(path: Path, content: str) -> GeminiCall:
    """The CLI's ``write_file`` tool."""
    return GeminiCall("write_file", {"file_path": str(path), "content": content})


def last_output(server: GeminiServer) -> list[tuple[str, str]]:
    """What the model was told of each tool call, in the last request: (tool, output)."""
    return [(r.name, r.output) for r in function_responses(server.generate_requests[-1])]


async def test_gemini_edits_go_through_the_parents_tools(rig: Rig, tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("one\ntwo\nthree\n", encoding="utf-8")
    other = tmp_path / "other.txt"
    other.write_text("old\n", encoding="utf-8")
    shell = {"command": "echo ran > ran.txt", "description": "mark"}
    marker = "sleep 61.25"  # an unusual sleep: its command line identifies it
    background = {"command": marker, "description": "wait", "is_background": True}
    rig.server.when(
        "please edit the notes",
        GeminiReply(calls=[replace(notes, "two", "TWO")]),
        GeminiReply(calls=[write(other, "new\n")]),
        GeminiReply(calls=[GeminiCall("read_file", {"file_path": str(notes)})]),
        GeminiReply(calls=[GeminiCall("run_shell_command", shell)]),
        GeminiReply(calls=[GeminiCall("run_shell_command", background)]),
        reply_with_function_response(ANSWER),
    )
    ran = await rig.run(rig.config("gemini", permission="allow"), "please edit the notes")
    assert ran.result.stop_reason == "completed", ran.result.diagnostic
    assert notes.read_text(encoding="utf-8") == "one\nTWO\nthree\n"
    assert other.read_text(encoding="utf-8") == "new\n"
    # the edits' reads and writes were served by the parent's read_file / write_file
    assert ran.served() == [
        (f"Read {notes}", "completed"),  # replace reads the file to compute the edit
        (f"Read {notes}", "completed"),  # and again when it applies it
        (f"Write {notes}", "completed"),
        (f"Read {other}", "completed"),  # write_file reads what it overwrites (to show
        (f"Read {other}", "completed"),  # the diff, then again to write)
        (f"Write {other}", "completed"),
    ]
    # its read_file tool and its shell are its own: no request reaches dsh for them
    assert (tmp_path / "ran.txt").read_text(encoding="utf-8") == "ran\n"
    told = last_output(rig.server)
    assert [name for name, _ in told] == [
        "replace", "write_file", "read_file", "run_shell_command", "run_shell_command"
    ]  # fmt: skip
    assert "background" in told[4][1].lower(), told[4][1]
    assert any(marker in line for line in ran.processes.values())  # seen while it ran
    assert running(marker) == []  # the agent's background command went with the run
    assert told[0][1].startswith(f"Successfully modified file: {notes} (1 replacements)")
    assert told[2][1] == "one\nTWO\nthree\n"
    assert {i.split("__")[0] for i in ran.agent_reported()} >= {"read_file", "run_shell_command"}
    # one model request per step, nothing else (no routing, correction or other model)
    assert len(rig.server.requests) == 6
    assert len(rig.server.generate_requests) == 6


async def test_a_new_file_cannot_be_made_through_the_client(rig: Rig, tmp_path: Path) -> None:
    """Gemini CLI 0.61.0 cannot create a file through the client: before writing it reads
    the file, and takes the read's error as "missing" only from an ``Error`` whose
    message says so, but the ACP SDK rejects with the plain JSON-RPC error object."""
    made = tmp_path / "made.txt"
    rig.server.when(
        "please make a file",
        GeminiReply(calls=[write(made, "made\n")]),
        reply_with_function_response(ANSWER),
    )
    ran = await rig.run(rig.config("gemini", permission="allow"), "please make a file")
    assert ran.result.stop_reason == "completed", ran.result.diagnostic
    assert not made.exists()
    assert ran.served() == [(f"Read {made}", "failed")] * 2  # no write was asked for
    ((name, output),) = last_output(rig.server)
    assert name == "write_file"
    assert output.startswith("Error checking existing file: fs/read_text_file:")
    assert "does not exist" in output


async def test_a_protected_path_is_refused(rig: Rig, tmp_path: Path) -> None:
    state = tmp_path / ".dsh" / "state.toml"  # under .dsh: protected by the parent's tools
    state.parent.mkdir()
    state.write_text("kept = true\n", encoding="utf-8")
    git = tmp_path / ".git" / "config"  # the CLI refuses .git by itself
    git.parent.mkdir()
    git.write_text("[core]\n", encoding="utf-8")
    rig.server.when(
        "please change the settings",
        GeminiReply(calls=[write(state, "kept = false\n")]),
        GeminiReply(calls=[write(git, "[core]\n\thooksPath = /tmp/evil\n")]),
        reply_with_function_response(ANSWER),
    )
    ran = await rig.run(rig.config("gemini", permission="allow"), "please change the settings")
    assert ran.result.stop_reason == "completed", ran.result.diagnostic
    assert state.read_text(encoding="utf-8") == "kept = true\n"
    assert git.read_text(encoding="utf-8") == "[core]\n"
    failed = [(title, end) for title, end in ran.served() if title.startswith("Write")]
    assert failed == [(f"Write {state}", "failed")]  # dsh refused it; .git never came
    refusals = ran.failures()
    assert any("protected" in text for text in refusals), refusals
    (_, dotdsh), (_, dotgit) = last_output(rig.server)
    assert dotdsh == "Error writing to file: [object Object]"  # dsh's reason is lost (above)
    assert dotgit.startswith(f'Path not in workspace: Attempted path "{git}" resolves outside')


async def test_a_reject_policy_blocks_the_write(rig: Rig, tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("one\ntwo\n", encoding="utf-8")
    rig.server.when(
        "please edit the notes",
        GeminiReply(calls=[replace(notes, "two", "TWO")]),
        reply_with_function_response(ANSWER),
    )
    config = rig.config("gemini")
    assert config.permission == "reject"
    ran = await rig.run(config, "please edit the notes")
    assert ran.result.stop_reason == "completed", ran.result.diagnostic
    assert notes.read_text(encoding="utf-8") == "one\ntwo\n"
    # it read the file to show the edit, asked, was refused, and wrote nothing
    assert ran.served() == [(f"Read {notes}", "completed")]
    ((name, output),) = last_output(rig.server)
    assert name == "replace"
    assert output == 'Tool "replace" was canceled by the user.'


async def test_the_parents_approver_is_asked_and_its_no_blocks_the_write(
    tmp_path: Path, entry: str, server: GeminiServer
) -> None:
    asked: list[PermissionRequest] = []

    async def refuse(request: PermissionRequest) -> PermissionDecision:
        asked.append(request)
        return PermissionDecision(False, "the user said no")

    notes = tmp_path / "notes.txt"
    notes.write_text("one\ntwo\n", encoding="utf-8")
    server.when(
        "please edit the notes",
        GeminiReply(calls=[replace(notes, "two", "TWO")]),
        reply_with_function_response(ANSWER),
    )
    async with rig_in(tmp_path, entry, server, extra="") as rig:  # write_file: "ask"
        rig.ctx.permissions.set_approver(refuse, agent=rig.parent)
        # the row lets the agent's own question through; the parent's policy still binds
        ran = await rig.run(rig.config("gemini", permission="allow"), "please edit the notes")
    assert ran.result.stop_reason == "completed", ran.result.diagnostic
    assert [(r.tool, r.title) for r in asked] == [("write_file", f"Write {notes}")]
    assert notes.read_text(encoding="utf-8") == "one\ntwo\n"
    assert ran.served()[-1] == (f"Write {notes}", "failed")
    assert any("the user said no" in text for text in ran.failures())  # the run's item says
    ((name, output),) = last_output(server)
    assert name == "replace"
    # the CLI stringifies the JSON-RPC error object (String(err), not its message): the
    # model is not told dsh's reason
    assert output == "[object Object]", output


async def test_with_its_own_workspace_gemini_writes_by_itself(rig: Rig, tmp_path: Path) -> None:
    """The contrast: ``workspace = "own"`` offers no ``fs``, so the CLI reads and writes
    its own disk; dsh sees only what it reports, and only the sandbox (``.dsh``
    read-only in it) stands between it and a protected path."""
    notes = tmp_path / "notes.txt"
    notes.write_text("one\ntwo\n", encoding="utf-8")
    made = tmp_path / "made.txt"
    state = tmp_path / ".dsh" / "state.toml"
    state.parent.mkdir()
    state.write_text("kept = true\n", encoding="utf-8")
    rig.server.when(
        "please edit the notes",
        GeminiReply(calls=[replace(notes, "two", "TWO")]),
        GeminiReply(calls=[write(made, "made\n")]),
        GeminiReply(calls=[write(state, "kept = false\n")]),
        reply_with_function_response(ANSWER),
    )
    config = rig.config("gemini-own", permission="allow", workspace="own")
    ran = await rig.run(config, "please edit the notes")
    assert ran.result.stop_reason == "completed", ran.result.diagnostic
    assert notes.read_text(encoding="utf-8") == "one\nTWO\n"
    assert made.read_text(encoding="utf-8") == "made\n"  # a new file works on its own disk
    assert state.read_text(encoding="utf-8") == "kept = true\n"
    assert ran.served() == []  # dsh saw only what the agent reported
    assert {i.split("__")[0] for i in ran.agent_reported()} == {"replace", "write_file"}
    ((_, edited), (_, wrote), (_, refused)) = last_output(rig.server)
    assert edited.startswith(f"Successfully modified file: {notes}")
    assert wrote.startswith(f"Successfully created and wrote to new file: {made}")
    assert refused.startswith(f"Error writing to file '{state}': EROFS: read-only file system")
