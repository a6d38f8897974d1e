"""The fault matrix's vocabulary: faults, cases, cells and the steps that induce them."""

from __future__ import annotations

import asyncio
import contextlib
import enum
import os
import signal
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
from pydantic import BaseModel

from dsh.core import (
    AbortSignal,
    Agent,
    Context,
    ModelRequest,
    ScriptedReply,
    ScriptedToolCall,
    Tool,
    ToolContext,
)
from dsh.core.models import BoundModel
from dsh.subagent import (
    SubagentRun,
    SubagentRuntime,
    SubagentStartRequest,
)
from dsh.testing._processes import cmdline, describe, live_children, process_tree
from dsh.testing._scripting import last_user_text, model, steps_in_turn
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

RUNNING_BOUND = 120.0
"""Seconds a case's ``wait_until_running`` / ``abort_during_start`` may take (an
"eventually": generous, so a loaded machine cannot fail it)."""
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
    ready_bound: float = 120.0
    """Seconds the parent gets to publish the run and get its tool process going (an
    "eventually": generous, so a loaded machine cannot fail it)."""


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

    return model(script)


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
