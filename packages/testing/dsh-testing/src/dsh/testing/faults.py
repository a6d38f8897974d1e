"""The fault matrix: every provider × every fault keeps the same four promises.

Subclass :class:`FaultMatrix` in your provider's tests and give it a
``fault_harness`` fixture that, for the ``fault`` it is handed, opens a context
with your provider registered and says how to induce that fault and what must
come of it (a :class:`FaultCase`)::

    class TestMyProviderFaults(FaultMatrix):
        not_applicable = {Fault.APPROVAL_REQUEST: "my child never asks: it has no tools"}

        @pytest.fixture
        async def fault_harness(self, fault: Fault) -> AsyncIterator[FaultHarness]:
            async with Context.open(preset) as ctx:
                yield FaultHarness(ctx, ctx.agents.create(), CASES[fault])

For every applicable cell the suite asserts:

* the run settles with the right stop reason (:data:`START_ABORTED`: the start
  raises :class:`~dsh.subagent.StartAborted`), with the expected diagnostic or
  output where the case names one;
* within a bound (:attr:`FaultCase.settle_bound`, counted from the fault);
* exactly one ``subagent/start`` and one ``subagent/end`` per started run (none
  for a start that raised), the end carrying the same stop reason;
* no process of the run's tree is alive :data:`PROCESS_GRACE` seconds after the
  run settled (after the SIGKILL, for :attr:`Fault.PARENT_SIGKILL`): the test
  runner is a child subreaper (the dsh-testing pytest plugin), so orphaned
  grandchildren are re-parented to it and counted too.

A fault that truly cannot happen for a provider is declared in the class's
:attr:`FaultMatrix.not_applicable` with a reason. Such a cell is no skip (under
``CI=true`` skips fail): it is a passing ``test_not_applicable[<fault>]`` that
checks the reason is stated and records it (``record_property``).

The parent-SIGKILL cell runs a separate parent process (``python -m
dsh.testing.faults parent SPEC.json``, see :class:`ParentProcess`) that opens a
context, starts the delegation whose tool runs a long process, and prints
``published``; the test waits until that long process runs, SIGKILLs the parent,
and asserts that every process of the tree is gone within :data:`PROCESS_GRACE`.

With the environment variable ``DSH_FAULT_MATRIX_REPORT`` set to a file name, every
cell appends one JSON line (provider, fault, outcome, seconds) to that file.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import enum
import importlib.util
import inspect
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest
from pydantic import BaseModel

from dsh.core import (
    AbortSignal,
    Agent,
    BoundModel,
    BusEvent,
    Context,
    ModelRequest,
    ScriptedAdapter,
    ScriptedReply,
    ScriptedToolCall,
    Tool,
    ToolContext,
    parse_preset,
)
from dsh.subagent import (
    StartAborted,
    SubagentResult,
    SubagentRun,
    SubagentRuntime,
    SubagentStartRequest,
)
from dsh.testing.model_servers import (
    ChatReply,
    ChatToolCall,
    Hang,
    HTTPError,
    OpenAIChatServer,
    RecordedRequest,
    StreamFaults,
)
from dsh.testing.model_servers import last_user_text as chat_user_text
from dsh.testing.processes import alive, cmdline, describe, live_children, process_tree
from dsh.testing.processes import reap_zombies as _reap_zombies
from dsh.testing.scripting import last_user_text, steps_in_turn

__all__ = [
    "GARBAGE_BODY",
    "PROCESS_GRACE",
    "START_ABORTED",
    "TREE_GONE",
    "Cell",
    "CellStep",
    "Fault",
    "FaultCase",
    "FaultHarness",
    "FaultMatrix",
    "ParentProcess",
    "fault_chat_server",
    "fault_model",
    "freeze_child",
    "guarded_tool",
    "in_process_case",
    "kill_child",
    "one_tick",
    "until",
    "until_child_process",
    "until_progress",
    "until_requested",
]


class Fault(enum.Enum):
    """The faults of the matrix (the value is the test id)."""

    CANCEL_BEFORE_PUBLICATION = "cancel-before-publication"
    """The signal fires before ``start`` returned: ``StartAborted``, nothing emitted."""
    CANCEL_MID_TURN = "cancel-mid-turn"
    """The signal fires while the child works: ``aborted``."""
    DOUBLE_CANCEL = "double-cancel"
    """The task awaiting ``dispose()`` is cancelled, and again one loop tick later."""
    CHILD_CRASH = "child-crash"
    """The child process dies mid-turn (in-process: the model raises)."""
    CHILD_HANG = "child-hang"
    """The child never answers (``turn_timeout`` → ``error``; in-process: cancel)."""
    IGNORES_CANCEL = "ignores-cancel"
    """The child does not react to the cancel (nor to stdin EOF, nor SIGTERM)."""
    GARBAGE_OUTPUT = "garbage-output"
    """The child (or its model server) answers with malformed data."""
    HTTP_500 = "http-500"
    """The model answers HTTP 500."""
    APPROVAL_REQUEST = "approval-request"
    """The child asks for approval: answered by policy, never left hanging."""
    PARENT_SIGKILL = "parent-sigkill"
    """The process running the delegation is SIGKILLed while a tool process runs."""


START_ABORTED = "start-aborted"
""":attr:`FaultCase.expect` of a start that must raise :class:`~dsh.subagent.StartAborted`."""
TREE_GONE = "tree-gone"
""":attr:`FaultCase.expect` of the parent-SIGKILL cell: every process of the tree is gone."""

PROCESS_GRACE = 2.0
"""Seconds after the run settled (after the SIGKILL of the parent) within which no
process of the tree may be alive."""

GARBAGE_BODY = StreamFaults(malformed_after=0, close_after=0)
"""Stream faults that make a model server's whole answer one line that is not an SSE
event, then close the connection (a product may skip one bad event inside an
otherwise good stream: codex does)."""

RUNNING_BOUND = 30.0
"""Seconds a case's ``wait_until_running`` / ``abort_during_start`` may take."""
DISPOSE_BOUND = 10.0
"""Seconds ``dispose()`` may take once the run has settled."""

EVENT_START = "subagent/start"
EVENT_END = "subagent/end"

CellStep = Callable[["Cell"], Awaitable[None]]
"""A step of a case (wait until the child runs, induce the fault...), given the cell."""


@dataclass
class ParentProcess:
    """The parent-SIGKILL cell: what the separate parent process loads and starts.

    The parent opens a context from ``preset`` (default: a scripted parent model) in
    ``cwd`` (default: the harness context's cwd), calls ``setup(ctx)`` if given
    (``"path/to/file.py:function"``, sync or async: register a test tool...), loads
    ``plugins`` (``(name, config)`` in order: the provider's plugin row), starts the
    case's prompt on the case's provider and prints ``published``. The test then
    waits until a process of the parent's tree has ``marker`` in its command line
    (the tool's long process), SIGKILLs the parent and asserts that the whole tree
    is gone within :data:`PROCESS_GRACE`.
    """

    plugins: Sequence[tuple[str, Mapping[str, Any]]] = ()
    preset: str = '[agent.model]\nadapter = "scripted"\n'
    setup: str | None = None
    marker: str = "sleep 300"
    cwd: str | None = None
    env: Mapping[str, str] | None = None
    """Variables added to the parent process's environment."""
    ready_bound: float = 30.0
    """Seconds the parent gets to publish the run and get its tool process going."""


@dataclass
class FaultCase:
    """How one fault is induced for one provider, and what must come of it."""

    provider: str
    """The registered provider to start."""
    expect: str
    """The stop reason the run must settle with; :data:`START_ABORTED` for
    :attr:`Fault.CANCEL_BEFORE_PUBLICATION`, :data:`TREE_GONE` for
    :attr:`Fault.PARENT_SIGKILL`."""
    prompt: str = "fault matrix probe"
    agent_options: Mapping[str, Any] | None = None
    diagnostic: str | None = None
    """A piece of text the result's diagnostic must contain."""
    output: str | None = None
    """A piece of text the result's output must contain."""
    wait_until_running: CellStep | None = None
    """Returns once the child is at work (before the fault is induced)."""
    induce: CellStep | None = None
    """Induces the fault once the child is at work (kill it, freeze it...); the
    cancel faults then fire the signal."""
    abort_during_start: CellStep | None = None
    """:attr:`Fault.CANCEL_BEFORE_PUBLICATION`: returns at the moment to fire the signal
    while ``start`` runs (e.g. :func:`until_child_process`). Without it only the
    already-aborted signal is checked (in-process starts have no await to abort)."""
    settle_bound: float = 10.0
    """Seconds within which the run must settle, counted from the fault."""
    parent_process: ParentProcess | None = None
    """:attr:`Fault.PARENT_SIGKILL`: the parent process to run and kill."""


@dataclass
class FaultHarness:
    """An open context with the provider registered, a parent agent, and the case."""

    ctx: Context
    parent: Agent
    case: FaultCase

    @property
    def runtime(self) -> SubagentRuntime:
        """The context's subagent runtime."""
        return SubagentRuntime.of(self.ctx)

    def request(self, signal: AbortSignal) -> SubagentStartRequest:
        """The case's start request from the harness's parent."""
        case = self.case
        return SubagentStartRequest(
            case.prompt, self.parent, signal, label="fault-matrix", agent_options=case.agent_options
        )


@dataclass
class Cell:
    """One running cell: what a :data:`CellStep` sees."""

    fault: Fault
    harness: FaultHarness
    before: frozenset[int]
    """This process's live children before the cell started anything."""
    run: SubagentRun | None = None
    touched: set[int] = field(default_factory=set)
    """Processes a step signalled (frozen...): killed when the cell ends, whatever happened."""

    def new_processes(self) -> set[int]:
        """Live children of this process started (or orphaned to it) since the cell began."""
        return live_children() - self.before

    def child(self, match: str | None = None) -> int:
        """The provider's child process: a new child of this process, with ``match`` in
        its command line if given (AssertionError unless exactly one fits)."""
        found = sorted(
            pid for pid in self.new_processes() if match is None or match in cmdline(pid)
        )
        if len(found) != 1:
            listed = "\n".join(describe(pid) for pid in found) or "(none)"
            raise AssertionError(f"expected one child process matching {match!r}, found:\n{listed}")
        return found[0]

    def kill_leftovers(self) -> None:
        """SIGKILL whatever the cell left (a failed cell must not poison the next one)."""
        for pid in process_tree(self.new_processes() | self.touched):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


# -- steps a case is built from ---------------------------------------------------------


def until(predicate: Callable[[], bool], what: str) -> CellStep:
    """A step that returns once ``predicate()`` holds (polled; fails if the run settles
    first, or after :data:`RUNNING_BOUND`)."""

    async def step(cell: Cell) -> None:
        deadline = time.monotonic() + RUNNING_BOUND
        while not predicate():
            run = cell.run
            if run is not None and run.settled:
                raise AssertionError(f"the run settled before {what}: {run.result.peek()!r}")
            if time.monotonic() > deadline:
                raise AssertionError(f"not within {RUNNING_BOUND:g} s: {what}")
            await anyio.sleep(0.01)

    return step


def until_progress(kind: str = "text") -> CellStep:
    """A step that returns once the run reported a progress item of ``kind``."""

    async def step(cell: Cell) -> None:
        run = cell.run
        assert run is not None
        with anyio.fail_after(RUNNING_BOUND):
            async with run.progress() as items:
                async for item in items:
                    if item.kind == kind:
                        return
        raise AssertionError(f"the run settled before it reported {kind!r} progress")

    return step


def until_child_process(match: str | None = None, *, then: float = 0.0) -> CellStep:
    """A step that returns ``then`` seconds after the provider's child process appeared
    (``match``: a piece of its command line). At once, the start is usually still
    spawning it; a little later, it awaits the child's handshake."""

    async def step(cell: Cell) -> None:
        def started() -> bool:
            return any(match is None or match in cmdline(p) for p in cell.new_processes())

        await until(started, f"a child process matching {match!r} runs")(cell)
        if then > 0:
            await anyio.sleep(then)

    return step


def one_tick() -> CellStep:
    """A step that returns one loop tick later: the start under way has reached its
    first await (spawning the child in a worker thread, for most providers)."""

    async def step(cell: Cell) -> None:
        await asyncio.sleep(0)

    return step


def kill_child(match: str | None = None) -> CellStep:
    """A step that SIGKILLs the provider's child process (a crash mid-turn)."""

    async def step(cell: Cell) -> None:
        os.kill(cell.child(match), signal.SIGKILL)

    return step


def freeze_child(match: str | None = None) -> CellStep:
    """A step that SIGSTOPs the provider's child process: from then on it ignores the
    cancel request, stdin EOF and SIGTERM alike; only SIGKILL ends it."""

    async def step(cell: Cell) -> None:
        pid = cell.child(match)
        cell.touched.add(pid)
        os.kill(pid, signal.SIGSTOP)

    return step


def fault_model(
    calls: list[str] | None = None,
    *,
    stubborn_for: float = 0.5,
    reply: str = "fault matrix: done",
    guarded_tool: str = "fault_guarded",
) -> BoundModel:
    """A scripted model for in-process children, keyed by a word of the prompt:

    ``hang`` never answers (until cancelled); ``crash`` raises (not a ModelError: the
    model itself breaks); ``stubborn`` ignores cancellation for ``stubborn_for``
    seconds, then hangs; ``approval`` calls ``guarded_tool`` (see
    :func:`guarded_tool`), then answers ``fault matrix: the tool said: <result>``;
    anything else answers ``reply``. Each call appends the prompt to ``calls`` (how a
    harness knows the child is at work).
    """

    async def script(request: ModelRequest) -> ScriptedReply:
        text = last_user_text(request)
        if calls is not None:
            calls.append(text)
        if "approval" in text:
            if steps_in_turn(request) == 0:
                return ScriptedReply(tool_calls=[ScriptedToolCall(name=guarded_tool)])
            return ScriptedReply(text="fault matrix: the tool said: {tool_results}")
        if "crash" in text:
            raise RuntimeError("fault matrix: the model crashed")
        if "stubborn" in text:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(stubborn_for)
            return ScriptedReply(hang=True)
        if "hang" in text:
            return ScriptedReply(hang=True)
        return ScriptedReply(text=reply)

    adapter = ScriptedAdapter(script)
    adapter.record_requests = True
    return BoundModel(adapter)


class _NoArguments(BaseModel):
    pass


def guarded_tool(name: str = "fault_guarded") -> Tool:
    """A tool whose permission policy is ``ask`` (it would edit a file): before it
    runs, the calling agent's approver is asked; unattended, nobody can answer and the
    call is refused. If it ever runs it answers ``fault matrix: the guarded tool ran``."""

    async def run(args: _NoArguments, tctx: ToolContext) -> str:
        return "fault matrix: the guarded tool ran"

    return Tool.from_model(
        name, "Edit the project (needs approval)", _NoArguments, run, permission="ask", kind="edit"
    )


def fault_chat_server(*, command_tool: str = "run_command") -> OpenAIChatServer:
    """A fake OpenAI chat-completions server (not started) answering by a word of the
    latest user message:

    ``hang`` never answers; ``garbage`` streams a little text, then a line that is not
    JSON; ``fail`` answers HTTP 500; ``run sleep`` calls ``command_tool`` with
    ``{"argv": ["sleep", "300"]}`` (the example plugin's command tool); anything else
    answers ``fault matrix: done``. A request whose last message is a tool result is
    answered ``fault matrix: the tool said: <result>``.
    """

    def answer(request: RecordedRequest) -> Any:
        body = request.json if isinstance(request.json, Mapping) else {}
        messages = body.get("messages") or [{}]
        last = messages[-1] if isinstance(messages[-1], Mapping) else {}
        if last.get("role") == "tool":  # the tool answered: report what it said
            return ChatReply(text=f"fault matrix: the tool said: {last.get('content')}")
        text = chat_user_text(request)
        if "hang" in text:
            return Hang()
        if "garbage" in text:
            return ChatReply(text="half an answer", faults=StreamFaults(malformed_after=2))
        if "fail" in text:
            return HTTPError(500, "fault matrix: the model server failed")
        if "run sleep" in text:
            call = ChatToolCall(command_tool, {"argv": ["sleep", "300"]})
            return ChatReply(tool_calls=[call])
        return ChatReply(text="fault matrix: done")

    return OpenAIChatServer(default=answer)


def until_requested(server: OpenAIChatServer, word: str) -> CellStep:
    """A step that returns once ``server`` holds an open request whose latest user
    message contains ``word`` (the child's model call is in flight)."""

    def requested() -> bool:
        return any(word in chat_user_text(r) and not r.client_disconnected for r in server.requests)

    return until(requested, f"the model server was asked about {word!r}")


def openai_model_options(api_base: str) -> dict[str, Any]:
    """``agent_options`` giving an in-process child the ``openai`` adapter (dsh-llm-openai,
    loaded in the context) pointed at a fake server's ``api_base``."""
    options = {"base_url": api_base, "api_key_env": "", "read_timeout": 30.0}
    return {"model": {"adapter": "openai", "model": "fault-matrix", "options": options}}


def in_process_case(
    fault: Fault,
    provider: str,
    *,
    calls: list[str],
    model_server: OpenAIChatServer | None = None,
    sleep_tool: str = "fault_sleep",
    parent_process: ParentProcess | None = None,
) -> FaultCase:
    """The case of ``fault`` for an in-process provider whose children run on
    :func:`fault_model` (its ``calls`` list) by default.

    ``model_server`` (started, from :func:`fault_chat_server`): the garbage and HTTP 500
    cells give the child the ``openai`` adapter pointed at it (load dsh-llm-openai in
    the context). The approval cell's child calls :func:`guarded_tool` (register it in
    the context): with no approver anywhere above the child (an unattended
    delegation), the call is refused at once and the child answers with the refusal.
    ``parent_process``: the parent-SIGKILL cell (its parent registers ``sleep_tool``, a
    tool that runs ``sleep 300`` through dsh.subprocess); the child's model calls
    ``sleep_tool``.
    """

    def model_called(word: str) -> CellStep:
        return until(lambda: any(word in text for text in calls), f"the child's model got {word!r}")

    if fault is Fault.CANCEL_BEFORE_PUBLICATION:
        return FaultCase(provider, START_ABORTED, prompt="hang")
    if fault in (Fault.CANCEL_MID_TURN, Fault.CHILD_HANG):
        # in-process children have no turn timeout: a hang is ended by the cancel
        return FaultCase(
            provider,
            "aborted",
            prompt="hang",
            diagnostic=f"fault matrix: {fault.value}",
            wait_until_running=model_called("hang"),
            settle_bound=1.0,
        )
    if fault is Fault.DOUBLE_CANCEL:
        return FaultCase(
            provider, "aborted", prompt="hang", wait_until_running=model_called("hang")
        )
    if fault is Fault.CHILD_CRASH:
        return FaultCase(provider, "error", prompt="crash", diagnostic="the model crashed")
    if fault is Fault.IGNORES_CANCEL:
        # the model call shields itself from the cancel for a while (0.5 s)
        return FaultCase(
            provider,
            "aborted",
            prompt="stubborn",
            wait_until_running=model_called("stubborn"),
            settle_bound=2.0,
        )
    if fault in (Fault.GARBAGE_OUTPUT, Fault.HTTP_500):
        assert model_server is not None, f"the {fault.value} cell needs a model_server"
        word, says = ("garbage", "malformed") if fault is Fault.GARBAGE_OUTPUT else ("fail", "500")
        return FaultCase(
            provider,
            "error",
            prompt=f"please {word}",
            agent_options=openai_model_options(model_server.api_base),
            diagnostic=says,
        )
    if fault is Fault.APPROVAL_REQUEST:
        return FaultCase(provider, "completed", prompt="approval", output="nobody can answer")
    if fault is Fault.PARENT_SIGKILL:
        assert parent_process is not None, "the parent-sigkill cell needs a parent_process"
        replies = [{"tool_calls": [{"name": sleep_tool, "arguments": {}}]}, {"text": "done"}]
        model_config = {"adapter": "scripted", "options": {"replies": replies}}
        return FaultCase(
            provider,
            TREE_GONE,
            prompt="run the long tool",
            agent_options={"model": model_config},
            parent_process=parent_process,
        )
    raise ValueError(f"no in-process case for {fault.value}")


# -- the suite ---------------------------------------------------------------------------


class _Recorder:
    """``subagent/start`` and ``subagent/end`` events of one context."""

    def __init__(self, ctx: Context) -> None:
        self.events: list[BusEvent] = []
        self._offs = [
            ctx.events.on(EVENT_START, self.events.append),
            ctx.events.on(EVENT_END, self.events.append),
        ]

    def close(self) -> None:
        for off in self._offs:
            off()

    def of(self, run_id: str) -> list[BusEvent]:
        return [e for e in self.events if e.data.get("run_id") == run_id]


def _cancels(fault: Fault, case: FaultCase) -> bool:
    """Does the suite fire the signal once the child is at work (and the fault induced)?"""
    if fault in (Fault.CANCEL_MID_TURN, Fault.IGNORES_CANCEL):
        return True
    return fault is Fault.CHILD_HANG and case.expect == "aborted"


def _report(request: pytest.FixtureRequest, fault: Fault, **facts: Any) -> None:
    suite = request.node.parent.name if request.node.parent is not None else ""
    line = {"suite": suite, "fault": fault.value, **facts}
    for key, value in line.items():
        request.node.user_properties.append((key, value))
    summary = ", ".join(f"{k}={v}" for k, v in facts.items() if k != "provider")
    print(f"fault matrix: {facts.get('provider', suite)} {fault.value}: {summary}")
    target = os.environ.get("DSH_FAULT_MATRIX_REPORT")
    if target:
        with open(target, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(line) + "\n")


async def _processes_gone(cell: Cell, within: float) -> float:
    """Seconds until no process the cell started (or that was orphaned to this process)
    is alive; AssertionError after ``within``."""
    started = time.monotonic()
    while True:
        left = cell.new_processes()
        elapsed = time.monotonic() - started
        if not left:
            return elapsed
        if elapsed > within:
            tree = process_tree(left)
            raise AssertionError(
                f"processes alive {within:g} s after the fault settled:\n"
                + "\n".join(describe(pid) for pid in sorted(tree))
            )
        await anyio.sleep(0.01)


_PR_GET_CHILD_SUBREAPER = 37


def _subreaper() -> bool | None:
    """Is this process a child subreaper (None: unknown, not Linux)?"""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        value = ctypes.c_int(0)
        if libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(value), 0, 0, 0) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return value.value != 0


class FaultMatrix:
    """Base class of the fault matrix; subclass it and define a ``fault_harness`` fixture
    that takes the ``fault`` and yields a :class:`FaultHarness`."""

    not_applicable: ClassVar[Mapping[Fault, str]] = {}
    """Faults that cannot happen for this provider, each with the reason why."""

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """``test_fault`` runs once per applicable fault, ``test_not_applicable`` once per
        fault declared not applicable (once, as ``none``, when every fault applies)."""
        declared = type(self).not_applicable
        name = metafunc.function.__name__
        if name == "test_fault":
            faults = [fault for fault in Fault if fault not in declared]
            metafunc.parametrize("fault", faults, ids=[fault.value for fault in faults])
        elif name == "test_not_applicable":
            cells: list[tuple[Fault | None, str]] = [
                (fault, declared[fault]) for fault in Fault if fault in declared
            ]
            ids = [f"{fault.value}-n/a" for fault, _ in cells if fault is not None]
            if not cells:
                cells, ids = [(None, "")], ["none"]
            metafunc.parametrize(("fault", "reason"), cells, ids=ids)

    @pytest.fixture
    def fault_harness(self, fault: Fault) -> FaultHarness:
        """Override in the subclass (usually an async generator fixture)."""
        raise NotImplementedError("define a `fault_harness` fixture in your FaultMatrix subclass")

    def test_not_applicable(
        self, fault: Fault | None, reason: str, request: pytest.FixtureRequest
    ) -> None:
        """A fault declared not applicable states why (and the reason is recorded)."""
        if fault is None:
            assert not type(self).not_applicable
            return
        assert isinstance(fault, Fault)
        assert isinstance(reason, str)
        assert len(reason.split()) >= 5, (
            f"{fault.value} is declared not applicable without a reason that says why: {reason!r}"
        )
        _report(request, fault, outcome="n/a", reason=reason)

    @pytest.mark.anyio
    async def test_fault(
        self, fault: Fault, fault_harness: FaultHarness, request: pytest.FixtureRequest
    ) -> None:
        """The cell: settle right, within the bound, one event pair, nothing left running."""
        case = fault_harness.case
        if fault is Fault.CANCEL_BEFORE_PUBLICATION:
            assert case.expect == START_ABORTED, "cancel before publication expects START_ABORTED"
        if fault is Fault.PARENT_SIGKILL:
            assert case.expect == TREE_GONE, "the parent-SIGKILL cell expects TREE_GONE"
        if _subreaper() is False:
            pytest.fail(
                "the fault matrix needs the test runner to be a child subreaper, or orphaned"
                " grandchildren escape its process checks: run pytest with"
                " -p dsh.testing.pytest_plugin"
            )
        _reap_zombies()
        cell = Cell(fault, fault_harness, frozenset(live_children()))
        recorder = _Recorder(fault_harness.ctx)
        try:
            if fault is Fault.CANCEL_BEFORE_PUBLICATION:
                facts = await self._before_publication(cell, recorder)
            elif fault is Fault.PARENT_SIGKILL:
                facts = await self._parent_sigkill(cell)
            else:
                facts = await self._published(cell, recorder)
        finally:
            recorder.close()
            cell.kill_leftovers()
        _report(request, fault, provider=case.provider, **facts)

    # -- cells ---------------------------------------------------------------------------

    async def _before_publication(self, cell: Cell, recorder: _Recorder) -> dict[str, Any]:
        harness, case = cell.harness, cell.harness.case
        runtime = harness.runtime
        provider = runtime.get_provider(case.provider)
        assert provider is not None, f"provider {case.provider!r} is not registered"
        # 1. the signal fired before start: the runtime raises, and so does the provider
        signal = AbortSignal()
        signal.abort("fault matrix: cancelled before publication")
        with pytest.raises(StartAborted, match="cancelled before publication"):
            await runtime.start(case.provider, harness.request(signal))
        with pytest.raises(StartAborted, match="cancelled before publication"):
            await provider.start(harness.request(signal))
        facts: dict[str, Any] = {"outcome": START_ABORTED}
        # 2. the signal fires while start runs (the child exists, the handshake is on)
        if case.abort_during_start is not None:
            signal = AbortSignal()
            outcome: list[SubagentRun | BaseException] = []

            async def starter() -> None:
                try:
                    outcome.append(await runtime.start(case.provider, harness.request(signal)))
                except Exception as exc:
                    outcome.append(exc)

            aborted_at = 0.0
            with anyio.fail_after(RUNNING_BOUND + case.settle_bound):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(starter)
                    await case.abort_during_start(cell)
                    signal.abort("fault matrix: cancelled during start")
                    aborted_at = time.monotonic()
            raised_after = time.monotonic() - aborted_at
            (first,) = outcome
            if isinstance(first, SubagentRun):
                await first.dispose()
                raise AssertionError(
                    "the start published a run although the signal fired before it returned"
                    " (abort_during_start fired too late for this provider?)"
                )
            assert isinstance(first, StartAborted), f"expected StartAborted, got {first!r}"
            assert "cancelled during start" in str(first), first
            assert raised_after <= case.settle_bound, (
                f"the aborted start took {raised_after:.2f} s > {case.settle_bound:g} s to raise"
            )
            facts["raised_s"] = round(raised_after, 3)
        assert recorder.events == [], f"a start that raised emitted {recorder.events}"
        facts["gone_s"] = round(await _processes_gone(cell, PROCESS_GRACE), 3)
        return facts

    async def _published(self, cell: Cell, recorder: _Recorder) -> dict[str, Any]:
        fault, harness, case = cell.fault, cell.harness, cell.harness.case
        signal = AbortSignal()
        started = time.monotonic()
        run = await harness.runtime.start(case.provider, harness.request(signal))
        cell.run = run
        facts: dict[str, Any] = {}
        try:
            if case.wait_until_running is not None:
                await case.wait_until_running(cell)
            fault_at = time.monotonic() if case.wait_until_running is not None else started
            if fault is Fault.DOUBLE_CANCEL:
                assert not run.settled, f"the run settled before the fault: {run.result.peek()!r}"
                await _dispose_cancelled_twice(run)
            else:
                if case.induce is not None:
                    assert not run.settled, (
                        f"the run settled before the fault: {run.result.peek()!r}"
                    )
                    await case.induce(cell)
                if _cancels(fault, case):
                    assert not run.settled, (
                        f"the run settled before the cancel: {run.result.peek()!r}"
                    )
                    signal.abort(f"fault matrix: {fault.value}")
            try:
                with anyio.fail_after(case.settle_bound):
                    result = await run.result
            except TimeoutError:
                raise AssertionError(
                    f"the run did not settle within {case.settle_bound:g} s of the fault"
                ) from None
            settled_s = time.monotonic() - fault_at
            _check_result(result, case)
            facts.update(outcome=result.stop_reason, settled_s=round(settled_s, 3))
            facts["diagnostic"] = (result.diagnostic or "").split("\n", 1)[0][:160]
            facts["gone_s"] = round(await _processes_gone(cell, PROCESS_GRACE), 3)
            with anyio.fail_after(DISPOSE_BOUND):
                await run.dispose()
                await run.dispose()  # idempotent
            assert run.disposed
        finally:
            if not run.disposed:
                with anyio.move_on_after(DISPOSE_BOUND, shield=True):
                    await run.dispose()
        events = recorder.of(run.id)
        assert [e.type for e in events] == [EVENT_START, EVENT_END], (
            f"expected one subagent/start and one subagent/end, got {[e.type for e in events]}"
        )
        assert events[1].data.get("stop_reason") == result.stop_reason, events[1].data
        assert events[1].scope == harness.parent.id
        return facts

    async def _parent_sigkill(self, cell: Cell) -> dict[str, Any]:
        harness, case = cell.harness, cell.harness.case
        spec = case.parent_process
        assert spec is not None, "the parent-sigkill case needs a ParentProcess"
        payload = {
            "preset": spec.preset,
            "plugins": [[name, dict(config)] for name, config in spec.plugins],
            "setup": spec.setup,
            "cwd": spec.cwd or harness.ctx.cwd,
            "provider": case.provider,
            "prompt": case.prompt,
            "agent_options": dict(case.agent_options) if case.agent_options else None,
        }
        with tempfile.TemporaryDirectory(prefix="dsh-fault-parent-") as folder:
            spec_file, stderr_file = _parent_files(Path(folder), payload)
            with _open_for_writing(stderr_file) as stderr:
                process = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "dsh.testing.faults",
                    "parent",
                    str(spec_file),
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=stderr,
                    env={**os.environ, **(spec.env or {})},
                )
            tree: set[int] = set()
            try:
                tree = await _until_tool_runs(process, spec, stderr_file)
                names = {pid: cmdline(pid)[:160] for pid in tree}
                process.kill()
                await process.wait()
                killed_at = time.monotonic()
                try:
                    gone = await _processes_gone(cell, PROCESS_GRACE)
                except AssertionError as exc:
                    listed = "\n".join(f"{pid}: {names[pid]}" for pid in sorted(tree))
                    raise AssertionError(
                        f"{exc}\nthe tree when the parent was killed:\n{listed}"
                    ) from None
                survivors = {pid for pid in tree if alive(pid)}
                assert not survivors, "survived the parent's SIGKILL:\n" + "\n".join(
                    describe(pid) for pid in sorted(survivors)
                )
                gone = max(gone, time.monotonic() - killed_at)
            finally:
                if process.returncode is None:
                    process.kill()
                    await process.wait()
                for pid in tree:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
                assert process.stdout is not None
                with anyio.move_on_after(2):
                    await process.stdout.read()
        return {"outcome": TREE_GONE, "tree": len(tree), "gone_s": round(gone, 3)}


def _check_result(result: SubagentResult, case: FaultCase) -> None:
    assert result.stop_reason == case.expect, (
        f"expected stop reason {case.expect!r}, got {result.stop_reason!r}"
        f" (diagnostic: {result.diagnostic!r}, output: {result.output[:300]!r})"
    )
    if result.stop_reason != "completed":
        assert result.diagnostic, "a run that did not complete must say why in its diagnostic"
    if result.diagnostic is not None:
        assert len(result.diagnostic.encode()) <= 4096
    if case.diagnostic is not None:
        assert case.diagnostic in (result.diagnostic or ""), (
            f"the diagnostic does not mention {case.diagnostic!r}: {result.diagnostic!r}"
        )
    if case.output is not None:
        assert case.output in result.output, (
            f"the output does not contain {case.output!r}: {result.output[:500]!r}"
        )


async def _dispose_cancelled_twice(run: SubagentRun) -> None:
    """``dispose()`` in a task; that task cancelled, and again one loop tick later."""
    waiter = asyncio.get_running_loop().create_task(run.dispose())
    await asyncio.sleep(0)  # dispose() has begun
    waiter.cancel()
    await asyncio.sleep(0)  # one loop tick later
    waiter.cancel()
    await asyncio.wait({waiter})


def _parent_files(folder: Path, payload: Mapping[str, Any]) -> tuple[Path, Path]:
    """The parent's spec file (written) and the file its stderr goes to."""
    spec_file = folder / "parent.json"
    spec_file.write_text(json.dumps(payload), encoding="utf-8")
    return spec_file, folder / "stderr.txt"


def _open_for_writing(path: Path) -> Any:
    return path.open("wb")


async def _until_tool_runs(
    process: asyncio.subprocess.Process, spec: ParentProcess, stderr_file: Path
) -> set[int]:
    """The parent's tree (without the parent) once it published and its tool's long
    process runs."""

    def failure(what: str) -> AssertionError:
        with contextlib.suppress(OSError):
            tail = stderr_file.read_text(errors="replace")[-3000:]
            return AssertionError(f"{what}; the parent's stderr:\n{tail}")
        return AssertionError(what)

    assert process.stdout is not None
    deadline = time.monotonic() + spec.ready_bound
    try:
        line = await asyncio.wait_for(process.stdout.readline(), spec.ready_bound)
    except TimeoutError:
        raise failure(f"the parent did not publish within {spec.ready_bound:g} s") from None
    if line != b"published\n":
        raise failure(f"the parent did not publish (it said {line!r})")
    while True:
        tree = process_tree({process.pid})
        if any(spec.marker in cmdline(pid) for pid in tree):
            return tree - {process.pid}
        if process.returncode is not None:
            raise failure("the parent exited before its tool process ran")
        if time.monotonic() > deadline:
            listed = "\n".join(describe(pid) for pid in sorted(tree))
            raise failure(f"no process matching {spec.marker!r} in the parent's tree:\n{listed}")
        await anyio.sleep(0.01)


# -- the parent process of the parent-SIGKILL cell ---------------------------------------


def _setup_function(reference: str) -> Callable[[Context], Any]:
    path, _, name = reference.rpartition(":")
    spec = importlib.util.spec_from_file_location(f"_dsh_fault_setup_{abs(hash(path))}", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load the setup module {path!r}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    function: Callable[[Context], Any] = getattr(module, name)
    return function


async def _parent(spec: Mapping[str, Any]) -> None:
    async with Context.open(parse_preset(spec["preset"]), cwd=spec["cwd"]) as ctx:
        if spec.get("setup"):
            done = _setup_function(spec["setup"])(ctx)
            if inspect.isawaitable(done):
                await done
        for index, (name, config) in enumerate(spec["plugins"]):
            await ctx.plugins.load(name, config, id=f"{name}#{index}")
        parent = ctx.agents.create()
        request = SubagentStartRequest(
            spec["prompt"], parent, AbortSignal(), agent_options=spec.get("agent_options")
        )
        await SubagentRuntime.of(ctx).start(spec["provider"], request)
        print("published", flush=True)
        await anyio.sleep_forever()


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m dsh.testing.faults parent SPEC.json``: the parent process of the
    parent-SIGKILL cell (see :class:`ParentProcess`); it runs until killed."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0] != "parent":
        raise SystemExit("usage: python -m dsh.testing.faults parent SPEC.json")
    with open(args[1], encoding="utf-8") as handle:
        spec = json.load(handle)
    anyio.run(_parent, spec)


if __name__ == "__main__":
    main()
