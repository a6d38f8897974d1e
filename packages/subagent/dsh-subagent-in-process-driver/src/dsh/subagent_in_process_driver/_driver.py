"""The in-process provider: a child :class:`~dsh.core.Agent` in the parent's context.

``spawn`` starts it fresh; ``fork`` seeds it with the parent's completed-turn
prefix. Everything else is shared: depth, persona, tool filter, structured
output, the descriptor event, settlement from the child's ``turn/end``, and
cancellation through the request signal.

Both also run *continuable* children (:meth:`InProcessProvider.prepare_continuable`):
the same child agent, handed to the subagent runtime's continuable registry
instead of being watched for one result, and re-opened from its persisted
session when its activation is gone.

The hot path allocates no task of its own: the child's turn runs as the
agent's task in the context, and the run settles from an observer of the
child's session.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from dsh.core import Agent, ToolError, text_of
from dsh.core.agents import PromptSections, ToolView
from dsh.core.models import BoundModel
from dsh.core.permissions import SandboxError
from dsh.core.sessions import Event
from dsh.subagent import (
    ALL_START_CAPABILITIES,
    Budget,
    BudgetMeter,
    InvalidRequest,
    RunHandle,
    StartAborted,
    SubagentCapabilities,
    SubagentProgress,
    SubagentResult,
    SubagentRun,
    SubagentRuntime,
    SubagentStartRequest,
    SubagentUsage,
)
from dsh.subagent.kit import BudgetMeters, effective_max_depth
from dsh.subagent_in_process_driver._budgeted import usd_refusal
from dsh.subagent_in_process_driver._options import InProcessAgentOptions, parse_agent_options
from dsh.subagent_in_process_driver._structured import StructuredCapture, structured_output_tool

__all__ = ["DELEGATION_SECTION", "DESCRIPTOR_EVENT", "InProcessProvider"]

DESCRIPTOR_EVENT = "subagent/descriptor"

DELEGATION_SECTION = (
    "You are a subagent: another agent delegated the task in the next message to you."
    " Your permission scope is fixed for this run: you have exactly the tools you are"
    " shown, and you cannot gain tools, permissions or a wider scope by asking. Work"
    " on the task alone; the delegating agent sees only your final message, so end"
    " with a complete answer."
)
STRUCTURED_SECTION = (
    "Deliver your result by calling the structured_output tool once with data that"
    " matches its schema, then end with a one-line summary."
)

_TOOL_STEPS = frozenset(("tool/call", "tool/result"))
"""Events after which a budgeted child's meter checks its caps (as at ``turn/start``)."""

_STOP_MAP = {
    "completed": "completed",
    "aborted": "aborted",
    "max-tokens": "max-tokens",
    "refusal": "refusal",
    "error": "error",
    "blocked": "error",
}


class InProcessProvider:
    """A subagent provider whose children are agents in the parent's context.

    With ``fork=True`` the child is seeded with the parent's events through its
    last ``turn/end`` (the in-flight turn, whose delegation call has no result
    yet, is left out).
    """

    def __init__(self, name: str, *, fork: bool) -> None:
        self.name = name
        self.fork = fork
        self.capabilities: SubagentCapabilities = ALL_START_CAPABILITIES
        self.inherits_parent_context = fork
        self.max_running: int | None = None
        """No cap on running children by default (a child costs ~10 KiB and no
        process); the ``dsh-subagent`` plugin's ``providers`` config sets one."""
        self._prompt_cache: tuple[object, int, str | None, PromptSections] | None = None
        self._meters_of: object = None
        """The context whose budget meters :attr:`_meters` are (looked up once per
        context)."""
        self._meters: BudgetMeters | None = None
        self._budget_shown: tuple[Budget, dict[str, Any]] | None = None
        """The last budget started and its JSON (a tool row starts every child with one)."""
        self._options_cache: dict[
            int, tuple[object, object, InProcessAgentOptions, BoundModel | None]
        ] = {}

    def __repr__(self) -> str:
        return f"<InProcessProvider {self.name} fork={self.fork}>"

    async def start(self, request: SubagentStartRequest) -> SubagentRun:
        """Create the child, publish the run, and start the child's first turn."""
        if request.signal.aborted:
            raise StartAborted(f"subagent start aborted: {request.signal.reason}")
        parent = request.parent
        child = self.create_child(request)
        capture: StructuredCapture | None = None
        if request.output_schema is not None:
            capture = StructuredCapture()
            try:
                child.tools.add(structured_output_tool(request.output_schema, capture))
            except Exception as exc:
                await child.aclose("start failed")
                raise InvalidRequest(f"output_schema cannot be used: {exc}") from exc
            child.prompt.set("structured", STRUCTURED_SECTION, order=150)
        handle = _ChildHandle(
            self.name, request, child, capture, _descriptor(self, request, child, parent)
        )
        cancel = child.cancel
        budget = request.budget
        if budget is not None:
            if budget.usd is not None:
                refusal = usd_refusal(child, budget)
                if refusal is not None:
                    await child.aclose("start failed")
                    raise InvalidRequest(refusal)
            registry = self._meters
            if registry is None or self._meters_of is not child.ctx:
                self._meters_of = child.ctx
                registry = self._meters = SubagentRuntime.of(child.ctx).meters
            handle.meters = registry
            handle.meter = registry.open(child, budget, cancel)
        handle.unlink = request.signal.on_abort(cancel)
        handle.watch()
        # The turn starts at the loop's next iteration, or when the result is first
        # awaited (start_now): after the caller had the run (progress from its first
        # item), and always in a task of its own (a waiter giving up must not stop it).
        child.start(request.prompt_blocks, soon=True)
        return handle.run

    async def prepare_continuable(
        self, request: SubagentStartRequest, *, resume: str | None = None
    ) -> Agent:
        """A continuable child's activation (no turn started): a new child for
        ``request``, or with ``resume`` the persisted child session of that id
        re-opened with ``request``'s scope (persona, tool filter, agent options)."""
        if request.signal.aborted:
            raise StartAborted(f"subagent start aborted: {request.signal.reason}")
        if request.output_schema is not None:
            raise InvalidRequest("continuable children do not take an output_schema")
        if request.budget is not None:
            raise InvalidRequest(
                "continuable children do not take a budget yet; start a one-shot child"
                " under the budget, or drop the budget"
            )
        parent = request.parent
        if resume is None:
            child = self.create_child(request)
            descriptor = _descriptor(self, request, child, parent)
            descriptor["continuable"] = True
            child.record(DESCRIPTOR_EVENT, descriptor)
            return child
        options, model = self._options(parent, request.agent_options)
        base = parent.prompt if self.fork else parent.ctx.prompt
        return parent.ctx.agents.resume(
            resume,
            model=model,
            tools=_child_tools(parent, request),
            label=request.label,
            prompt=self._child_prompt(base, request.persona),
            max_steps=options.max_steps,
            cut_off_turn=options.cut_off_turn,
        )

    def create_child(self, request: SubagentStartRequest) -> Agent:
        """The child agent for ``request`` (no turn started yet)."""
        parent = request.parent
        options, model = self._options(parent, request.agent_options)
        tools = _child_tools(parent, request)
        meta: dict[str, Any] = {"subagent_provider": self.name}
        limit = effective_max_depth(parent.session.header.meta, request.max_depth)
        if limit is not None:
            meta["max_depth"] = limit
        if self.fork:
            seed = parent.session.completed_prefix()
            base = parent.prompt
        else:
            seed = ()
            base = parent.ctx.prompt
        try:
            child = parent.ctx.agents.create(
                parent=parent,
                model=model,
                tools=tools,
                seed=seed,
                seed_from=parent.id if seed else None,
                meta=meta,
                label=request.label,
                max_steps=options.max_steps,
                prompt=self._child_prompt(base, request.persona),
                sandbox=options.sandbox,
            )
        except SandboxError as exc:
            raise InvalidRequest(f"invalid agent_options: {exc}") from None
        except ValueError as exc:
            raise InvalidRequest(f"invalid agent_options: {exc}") from None
        return child

    def _child_prompt(self, base: PromptSections, persona: str | None) -> PromptSections:
        """``base`` + the delegation section (+ persona), rendered once and reused
        while ``base`` is unchanged: children copy it with its rendered text."""
        cached = self._prompt_cache
        if (
            cached is not None
            and cached[0] is base
            and cached[1] == base.version
            and cached[2] == persona
        ):
            return cached[3]
        prompt = base.copy()
        if persona is not None:
            prompt.set("persona", persona)
        prompt.set("delegation", DELEGATION_SECTION)
        prompt.render()
        self._prompt_cache = (base, base.version, persona, prompt)
        return prompt

    def _options(
        self, parent: Agent, raw: Mapping[str, Any] | None
    ) -> tuple[InProcessAgentOptions, BoundModel | None]:
        """Parsed ``agent_options`` and the model they ask for, bound once per mapping.

        A tool passes the same mapping on every call, so children share one parsed
        options object and one adapter instead of validating and binding per child.
        The cache keeps a reference to the mapping, so its id cannot be reused
        while cached.
        """
        if not raw:
            return parse_agent_options(None), None
        llm = parent.ctx.llm
        cached = self._options_cache.get(id(raw))
        if cached is not None and cached[0] is raw and cached[1] is llm:
            return cached[2], cached[3]
        options = parse_agent_options(raw)
        try:
            bound = llm.bind(options.model) if options.model is not None else None
        except ValueError as exc:  # e.g. an unknown model adapter
            raise InvalidRequest(f"invalid agent_options: {exc}") from None
        if len(self._options_cache) >= 64:
            self._options_cache.pop(next(iter(self._options_cache)))
        self._options_cache[id(raw)] = (raw, llm, options, bound)
        return options, bound


def _child_tools(parent: Agent, request: SubagentStartRequest) -> ToolView:
    view = parent.tools.view
    flt = request.tool_filter
    if flt is None:
        return view
    try:
        return view.narrow(flt.allow, flt.deny)
    except ToolError as exc:
        raise InvalidRequest(str(exc)) from None


def _descriptor(
    provider: InProcessProvider, request: SubagentStartRequest, child: Agent, parent: Agent
) -> dict[str, Any]:
    meta = child.session.header.meta
    flt = request.tool_filter
    budget = request.budget
    shown = None
    if budget is not None:  # (its JSON built once per budget: a tool row's is the same)
        shown = provider._budget_shown
        if shown is None or shown[0] is not budget:
            shown = provider._budget_shown = (budget, budget.to_json())
    return {
        "run_id": child.id,
        "provider": provider.name,
        "parent_session": parent.id,
        "depth": int(meta.get("delegation_depth", 0)),  # (child.depth, without the call)
        "max_depth": meta.get("max_depth"),
        "label": request.label,
        "seed_length": meta.get("seed_length", 0),
        "persona": request.persona is not None,
        "tool_filter": None
        if flt is None
        else {"allow": list(flt.allow) if flt.allow is not None else None, "deny": list(flt.deny)},
        "output_schema": request.output_schema is not None,
        "budget": None if shown is None else dict(shown[1]),
    }


def _no_unlink() -> None:
    return None


class _ChildHandle(RunHandle):
    """One in-process run: the provider's handle, and the observer of the child that
    writes the descriptor into its first turn and settles the run from that turn's
    ``turn/end``; its teardown closes the child.

    One object per run (no closures, no bound methods kept). While the run is live
    the child's observers hold this handle and the handle holds the child; the
    observer is removed at settlement and dispose drops the links to the child and
    the signal, so a disposed run, this handle and the child die by reference
    counting, without the garbage collector.
    """

    __slots__ = (
        "capture",
        "child",
        "descriptor",
        "meter",
        "meters",
        "output",
        "turn_start",
        "unlink",
        "usage",
        "watching",
    )

    def __init__(
        self,
        provider: str,
        request: SubagentStartRequest,
        child: Agent,
        capture: StructuredCapture | None,
        descriptor: dict[str, Any] | None,
    ) -> None:
        super().__init__(child.id, provider=provider, local_agent=child, label=request.label)
        self.child: Agent | None = child
        self.unlink: Callable[[], None] = _no_unlink
        self.capture = capture
        self.descriptor = descriptor
        self.turn_start = -1
        self.output = ""
        self.usage: SubagentUsage | None = None
        """The child's model usage so far (cost and cached tokens where reported)."""
        self.watching = False
        """True while this handle is one of the child's observers."""
        self.meter: BudgetMeter | None = None
        """The run's budget meter (None: no budget)."""
        self.meters: BudgetMeters  # (set with a meter: where it is kept)

    # -- the child's events ------------------------------------------------------------

    def __call__(self, event: Event) -> None:
        kind = event.type
        meter = self.meter
        if kind == "assistant/message":
            data = event.data
            usage = data.get("usage")
            content = data.get("content")
            if content:
                text = text_of(content)
                if text:
                    self.output = text
            call = None
            if usage:
                call = SubagentUsage.from_json(usage)
                self.usage = call if self.usage is None else self.usage + call
            if meter is not None:
                meter.charge_usage(call)
        elif kind == "turn/start":
            if self.turn_start < 0:  # (the first: nothing spent yet, the start checked room)
                self.turn_start = event.seq
            elif meter is not None:
                meter.checkpoint()
            if self.descriptor is not None:
                descriptor, self.descriptor = self.descriptor, None
                if self.child is not None:
                    self.child.record(DESCRIPTOR_EVENT, descriptor)
        elif kind == "turn/end" and not self._settled:
            self.settle(self._outcome(event))
            self._stop_watching()  # settled: nothing more to watch
            if meter is not None:
                self._close_meter(meter)  # (closed once: not again at dispose)
        elif meter is not None and kind in _TOOL_STEPS:  # (before the next tool or model call)
            meter.checkpoint()

    def _outcome(self, end: Event) -> SubagentResult:
        output = self.output
        usage = self.usage if self.usage is not None else SubagentUsage.unknown()
        turn_stop = str(end.data.get("stop_reason"))
        stop = _STOP_MAP.get(turn_stop, "error")
        error = end.data.get("error")
        diagnostic = None
        if turn_stop == "blocked":
            diagnostic = f"the subagent was blocked: {error or 'no reason given'}"
        elif error is not None:
            diagnostic = str(error)
        meter = self.meter
        if meter is not None and stop in ("aborted", "error"):
            verdict = meter.verdict()  # stopped by its own budget or an ancestor's
            if verdict is not None:
                stop, diagnostic = verdict
        structured = None
        capture = self.capture
        if capture is not None:
            if capture.captured:
                structured = capture.value
            elif stop == "completed":
                stop = "error"
                diagnostic = "the subagent finished without calling structured_output"
        # (positional: on Python 3.11 a class called with keywords builds a dict of them)
        return SubagentResult(output, stop, structured, diagnostic, usage)

    def watch(self) -> None:
        """Become the child's observer (until settlement or dispose)."""
        child = self.child
        if child is not None:
            child.observe(self, deltas=False)
            self.watching = True

    def _stop_watching(self) -> None:
        if self.watching:
            self.watching = False
            child = self.child
            if child is not None:
                child.unobserve(self)

    # -- RunHandle hooks -------------------------------------------------------------

    def start_now(self) -> None:
        """The result is awaited: the child's pending turn starts now (its first step at
        once, in a task of its own: a turn that never waits has ended on return)."""
        child = self.child
        if child is not None:
            child.start_driver()

    def _start_progress(self) -> Callable[[], None] | None:
        child = self.child
        return child.observe(_ProgressMapper(self)) if child is not None else None

    def _teardown_now(self) -> bool:
        child = self.child
        if child is not None and not child.close_now():
            return False
        self._release()
        return True

    async def _teardown(self) -> None:
        child = self.child
        self.unlink()
        if child is not None:
            await child.aclose("subagent run disposed")
        self._release()

    def _close_meter(self, meter: BudgetMeter) -> None:
        self.meter = None  # (closed once: settlement, else dispose)
        self.meters.close(self._id, meter)

    def _release(self) -> None:
        self.unlink()
        self.unlink = _no_unlink
        self._stop_watching()
        self.child = None
        if not self._settled:
            self.settle(SubagentResult.aborted("subagent run disposed"))
        meter = self.meter  # (closed after settling: the run's end reports its spending)
        if meter is not None:
            self._close_meter(meter)


_TOOL_OUTPUT_EXCERPT = 400


class _ProgressMapper:
    """The child's events as progress items (attached only while someone listens)."""

    __slots__ = ("handle", "usage")

    def __init__(self, handle: RunHandle) -> None:
        self.handle = handle
        self.usage = SubagentUsage()

    def __call__(self, event: Event) -> None:
        kind = event.type
        data = event.data
        emit = self.handle.emit
        if kind == "assistant/delta":
            text = data.get("text")
            if text:
                emit(SubagentProgress("text", text=str(text)))
        elif kind == "tool/call":
            name = str(data.get("name", ""))
            emit(
                SubagentProgress(
                    "tool_call",
                    tool_call_id=str(data.get("id")),
                    name=name,
                    title=name,
                    arguments=data.get("arguments"),
                )
            )
        elif kind == "tool/result":
            output = text_of(data.get("content"))
            if len(output) > _TOOL_OUTPUT_EXCERPT:
                output = output[:_TOOL_OUTPUT_EXCERPT] + "…"
            emit(
                SubagentProgress(
                    "tool_update",
                    tool_call_id=str(data.get("call_id")),
                    name=str(data.get("name", "")),
                    status="failed" if data.get("is_error") else "completed",
                    text=output or None,
                )
            )
        elif kind == "assistant/message":
            usage = data.get("usage")
            if usage:
                self.usage = self.usage + SubagentUsage.from_json(usage)
                emit(SubagentProgress("usage", usage=self.usage))
