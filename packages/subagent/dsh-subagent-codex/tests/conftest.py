"""Fixtures: the pinned real codex binary, a fake Responses server, an isolated CODEX_HOME.

``codex_tape`` runs the real codex with its model calls on a committed tape
(``tests/tapes/<name>/``) instead of a fake server: see test_codex_taped.py.

Codex is found through env ``DSH_CODEX_BIN``, else ``<repo>/.tools/codex/bin/codex``
(what ``tools/install-codex.sh`` installs). Under ``CI=true`` a missing binary fails
the tests; locally they are skipped with the install command.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

from dsh.core import Agent, Context, parse_preset
from dsh.subagent import SubagentRuntime
from dsh.subagent_codex import CodexConfig, CodexProvider
from dsh.testing.model_servers import (
    Exchange,
    Hang,
    HTTPError,
    SSEEvent,
    StreamFaults,
    codex_offline_env,
)

# the Responses event stream a reply renders to (no public name for it yet)
from dsh.testing.model_servers import _openai_responses as responses_api
from dsh.testing.model_servers.openai_responses import (
    FunctionCall,
    OpenAIResponsesServer,
    ResponsesReply,
    reply_with_tool_output,
)
from dsh.testing.processes import cmdline, live_children, process_tree
from dsh.testing.pytest_plugin import TapeFactory

REPO = Path(__file__).resolve().parents[4]
DEFAULT_CODEX = REPO / ".tools" / "codex" / "bin" / "codex"

HELLO = "Hello from the fake model."
STALL_TEXT = "Partial answer before the stall"
THOUGHT = ("Weighing ", "the options.")
"""The reasoning summary a :class:`ThinkingReply` streams."""


def find_codex() -> str:
    """The codex binary to test, or a failure (CI) / skip (local) saying how to get it."""
    configured = os.environ.get("DSH_CODEX_BIN")
    path = Path(configured) if configured else DEFAULT_CODEX
    if path.is_file() and os.access(path, os.X_OK):
        return str(path)
    message = (
        f"codex binary not found at {path}"
        f"{' (from DSH_CODEX_BIN)' if configured else ''}; run tools/install-codex.sh"
        " (npm installs the pinned @openai/codex) or set DSH_CODEX_BIN"
    )
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def codex_bin() -> str:
    """Path of the real codex binary."""
    return find_codex()


class ThinkingReply(ResponsesReply):
    """A reply preceded by a reasoning item whose summary streams :data:`THOUGHT`."""


class ReasoningServer(OpenAIResponsesServer):
    """The fake Responses server, plus reasoning summaries for :class:`ThinkingReply`."""

    async def render(self, item: Any, exchange: Exchange) -> None:
        if not isinstance(item, ThinkingReply):
            await super().render(item, exchange)
            return
        body = exchange.request.json
        events = responses_api._events(item, body, "resp_think", self._output_items(item))
        seq = itertools.count(1000)
        where = {"item_id": "rs_1", "output_index": 0, "summary_index": 0}
        summary = {"type": "summary_text", "text": "".join(THOUGHT)}

        def event(kind: str, **data: Any) -> SSEEvent:
            return SSEEvent({"type": kind, "sequence_number": next(seq), **data}, event=kind)

        def reasoning(done: bool) -> dict[str, Any]:
            return {"id": "rs_1", "type": "reasoning", "summary": [summary] if done else []}

        thinking = [
            event("response.output_item.added", output_index=0, item=reasoning(False)),
            event("response.reasoning_summary_part.added", **where, part={**summary, "text": ""}),
            *(event("response.reasoning_summary_text.delta", **where, delta=d) for d in THOUGHT),
            event("response.reasoning_summary_text.done", **where, text=summary["text"]),
            event("response.reasoning_summary_part.done", **where, part=summary),
            event("response.output_item.done", output_index=0, item=reasoning(True)),
        ]
        await exchange.stream(events[:2] + thinking + events[2:], item.faults)


def standard_rules(server: OpenAIResponsesServer) -> None:
    """The scripted model every test shares, keyed by words in the prompt."""
    server.when("say hello", HELLO)
    server.when(
        "run echo",
        ResponsesReply(function_calls=[FunctionCall("exec_command", {"cmd": "echo hi"})]),
        reply_with_tool_output("Tool said: {output}"),
    )
    server.when(
        "run sleep",
        ResponsesReply(function_calls=[FunctionCall("exec_command", {"cmd": "sleep 300"})]),
    )
    server.when(
        "escalate",
        ResponsesReply(
            function_calls=[
                FunctionCall(
                    "exec_command",
                    {
                        "cmd": "touch made_by_tool.txt && echo made",
                        "sandbox_permissions": "require_escalated",
                        "justification": "the test needs a file",
                    },
                )
            ]
        ),
        reply_with_tool_output("Tool said: {output}"),
    )
    server.when("hang", Hang())
    server.when("fail", HTTPError(500, "scripted internal error"))
    server.when(
        "stall", ResponsesReply(text=STALL_TEXT, text_chunks=4, faults=StreamFaults(hang_after=6))
    )
    server.when("think first", ThinkingReply(text="Thought it through."))


@pytest.fixture
def responses() -> Iterator[OpenAIResponsesServer]:
    """A fake Responses API server with :func:`standard_rules` (and reasoning support)."""
    server = ReasoningServer()
    standard_rules(server)
    with server:
        yield server


@dataclass
class CodexSetup:
    """An isolated codex home and workspace pointed at a fake server (``server``), or,
    replaying a tape, at ``api_base`` with no server (the provider routes codex's model
    calls through the tape, whose replay ignores the address)."""

    bin: str
    root: Path
    server: OpenAIResponsesServer | None
    api_base: str = ""
    hello: str = HELLO
    stall_text: str = STALL_TEXT
    thought: tuple[str, ...] = THOUGHT
    workspace: Path = field(init=False)
    codex_home: Path = field(init=False)
    env: dict[str, str] = field(init=False)
    """The offline environment (:func:`codex_offline_env`), ``CODEX_HOME`` included."""

    def __post_init__(self) -> None:
        self.workspace = self.root / "ws"
        self.workspace.mkdir(parents=True, exist_ok=True)
        api_base = self.server.api_base if self.server is not None else self.api_base
        self.env = codex_offline_env(api_base, self.root)
        self.codex_home = Path(self.env["CODEX_HOME"])

    def config(self, **overrides: Any) -> dict[str, Any]:
        """Provider config (as in a preset row) for this setup."""
        env = dict(self.env)
        codex_home = env.pop("CODEX_HOME")  # the provider's own field sets it
        config: dict[str, Any] = {"command": self.bin, "codex_home": codex_home, "env": env}
        config.update(overrides)
        return config

    @asynccontextmanager
    async def context(
        self, preset_text: str = "", **overrides: Any
    ) -> AsyncIterator[tuple[Context, Agent]]:
        """An open context with the codex provider registered, and a parent agent
        (``preset_text`` is added to the parent's preset, e.g. a ``[sandbox]`` table)."""
        preset = parse_preset('[agent.model]\nadapter = "scripted"\n' + preset_text)
        async with Context.open(preset, cwd=self.workspace) as ctx:
            provider = CodexProvider(CodexConfig(**self.config(**overrides)))
            SubagentRuntime.of(ctx).register_provider(provider)
            yield ctx, ctx.agents.create()


@pytest.fixture
def codex(tmp_path: Path, codex_bin: str, responses: OpenAIResponsesServer) -> CodexSetup:
    """Real codex + fake server + isolated home, for one test."""
    return CodexSetup(codex_bin, tmp_path, responses)


UNREACHABLE_API = "http://127.0.0.1:9/v1"
"""Codex's model address when a tape replays: nothing listens there (the tape answers)."""


class CodexTapes:
    """``codex_tape(name, rules)``: a :class:`CodexSetup` whose codex model calls go
    through the test's tape ``tests/tapes/<name>/`` (the ``tape`` fixture of
    dsh-testing). By default the tape replays: no server runs, codex's model provider
    points at :data:`UNREACHABLE_API`, and the codex provider routes it through
    ``DSH_TAPE_PROXY`` to the replaying proxy. Under ``pytest --record-tapes`` the
    tape is written anew: against the real Responses API when ``OPENAI_API_KEY`` is set
    (at ``OPENAI_BASE_URL``, else OpenAI's), else against a fake Responses server
    with :func:`standard_rules` and ``rules``."""

    def __init__(
        self, tape: TapeFactory, bin: str, root: Path, stack: contextlib.ExitStack
    ) -> None:
        self.tape = tape
        self._bin, self._root, self._stack = bin, root, stack

    def offline(self) -> CodexSetup:
        """A setup with no server: codex's model calls go where ``DSH_TAPE_PROXY`` says."""
        return CodexSetup(self._bin, self._root, None, UNREACHABLE_API)

    def __call__(
        self, name: str, rules: Callable[[OpenAIResponsesServer], None] | None = None
    ) -> CodexSetup:
        if not self.tape.recording:
            self.tape(name)
            return self.offline()
        key = os.environ.get("OPENAI_API_KEY")
        if key:  # a real model answers: the fake's scripts do not apply
            real = os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
            self.tape(name, codex=real)
            setup = CodexSetup(self._bin, self._root, None, real)
            setup.env["FAKE_API_KEY"] = key  # the env_key of codex_offline_env's provider
            return setup
        server = self._stack.enter_context(ReasoningServer())
        standard_rules(server)
        if rules is not None:
            rules(server)
        self.tape(name, codex=server.api_base)
        return CodexSetup(self._bin, self._root, server)


@pytest.fixture
def codex_tape(tmp_path: Path, codex_bin: str, tape: TapeFactory) -> Iterator[CodexTapes]:
    """Real codex runs whose model calls are on a tape (:class:`CodexTapes`)."""
    with contextlib.ExitStack() as stack:
        yield CodexTapes(tape, codex_bin, tmp_path, stack)


# -- the process table ---------------------------------------------------------------


def _parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as stat:
        return int(stat.read().rsplit(b")", 1)[1].split()[1])


class ProcessTable:
    """Reads /proc: process trees, codex processes, and how long a tree takes to go."""

    def __init__(self, codex_bin: str) -> None:
        self.codex_real = os.path.realpath(codex_bin)

    @staticmethod
    def tree(roots: set[int]) -> set[int]:
        """Live (non-zombie) processes in ``roots`` and all their descendants."""
        return process_tree(roots)

    def new_tree(self, before: set[int]) -> set[int]:
        """This process's children started since ``before``, with their descendants."""
        return self.tree(live_children() - before)

    async def new_tree_settled(self, before: set[int], within: float = 3.0) -> set[int]:
        """:meth:`new_tree` once it is empty, or what is left after ``within`` seconds: a
        sandbox's inner processes die a moment after the bubblewrap around them (the
        kernel kills them when their parent goes), so the check waits, never samples."""
        deadline = time.monotonic() + within
        while (left := self.new_tree(before)) and time.monotonic() < deadline:
            await anyio.sleep(0.01)
        return left

    def codex(self) -> set[int]:
        """Live codex app-servers that descend from this test process (the runner is a
        child subreaper, so orphans count too): processes running the codex binary
        whose parent does not (codex re-executes itself for some tool calls, and such a
        helper may outlive the turn by a moment)."""
        found: dict[int, int] = {}
        for pid in self.tree(live_children()):
            try:
                if os.readlink(f"/proc/{pid}/exe") == self.codex_real:
                    found[pid] = _parent_of(pid)
            except OSError:
                continue
        return {pid for pid, parent in found.items() if parent not in found}

    async def wait_gone(self, pids: set[int], timeout: float) -> float:
        """Seconds until no process of ``pids``' trees lives; AssertionError after ``timeout``."""
        started = time.monotonic()
        while left := self.tree(pids):
            if time.monotonic() - started > timeout:
                raise AssertionError(
                    f"still running after {timeout} s: " + "; ".join(cmdline(p) for p in left)
                )
            await anyio.sleep(0.002)
        return time.monotonic() - started

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        """Poll ``predicate`` without blocking the event loop."""
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"condition not met within {timeout} s")
            await anyio.sleep(0.005)


@pytest.fixture
def procs(codex_bin: str) -> ProcessTable:
    """The process table."""
    return ProcessTable(codex_bin)
