"""The registry with the real runtime; only the child is scripted."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from dsh.core import AbortSignal, Agent, BusEvent, Context, parse_preset
from dsh.subagent import (
    ALL_START_CAPABILITIES,
    NO_START_CAPABILITIES,
    Budget,
    SubagentCapabilities,
    SubagentError,
    SubagentResult,
    SubagentRuntime,
    SubagentStartRequest,
    ToolFilter,
)
from dsh.subagent._runtime import (
    EVENT_END,
    EVENT_PROVIDER_ADDED,
    EVENT_PROVIDER_REMOVED,
    EVENT_START,
)
from dsh.testing.scripted_provider import HANG_PROMPT, ScriptedProvider

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(10)]


@pytest.fixture
async def ctx() -> AsyncIterator[Context]:
    async with Context.open(parse_preset('[agent.model]\nadapter = "scripted"\n')) as ctx:
        yield ctx


@pytest.fixture
def parent(ctx: Context) -> Agent:
    return ctx.agents.create(label="parent")


def record(ctx: Context) -> list[BusEvent]:
    seen: list[BusEvent] = []
    for kind in (EVENT_START, EVENT_END, EVENT_PROVIDER_ADDED, EVENT_PROVIDER_REMOVED):
        ctx.events.on(kind, seen.append)
    return seen


def request(parent: Agent, prompt: str = "do it", **fields: object) -> SubagentStartRequest:
    return SubagentStartRequest(prompt, parent, AbortSignal(), **fields)  # type: ignore[arg-type]


async def test_register_list_get_and_events(ctx: Context) -> None:
    seen = record(ctx)
    runtime = SubagentRuntime.of(ctx)
    assert ctx.subagents is runtime
    a, b = ScriptedProvider("b-first"), ScriptedProvider("a-second")
    remove_a = runtime.register_provider(a)
    runtime.register_provider(b)
    assert runtime.list() == ["b-first", "a-second"]
    assert runtime.get_provider("b-first") is a
    assert runtime.get_provider("nope") is None
    remove_a()
    remove_a()  # idempotent
    assert runtime.list() == ["a-second"]
    assert [(e.type, e.data["name"]) for e in seen] == [
        (EVENT_PROVIDER_ADDED, "b-first"),
        (EVENT_PROVIDER_ADDED, "a-second"),
        (EVENT_PROVIDER_REMOVED, "b-first"),
    ]


async def test_duplicate_provider(ctx: Context) -> None:
    runtime = SubagentRuntime.of(ctx)
    runtime.register_provider(ScriptedProvider("x"))
    with pytest.raises(SubagentError) as info:
        runtime.register_provider(ScriptedProvider("x"))
    assert info.value.code == "DUPLICATE_PROVIDER"
    assert str(info.value) == 'a subagent provider named "x" is already registered'


async def test_missing_provider(ctx: Context, parent: Agent) -> None:
    with pytest.raises(SubagentError) as info:
        await SubagentRuntime.of(ctx).start("ghost", request(parent))
    assert info.value.code == "NO_PROVIDER"
    assert str(info.value).startswith('no subagent provider registered for "ghost": ')


def install_provider(path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Installs (metadata only, on sys.path) a distribution ``dsh-<name>`` declaring a
    provider ``name`` and its plugin row, the way a provider package's pyproject does."""
    info = path / f"dsh_{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: dsh-{name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        f'[dsh.plugins]\ndsh-{name} = "dsh_{name}:plugin"\n\n'
        f'[dsh.providers]\n{name} = "dsh_{name}:plugin"\n'
    )
    monkeypatch.syspath_prepend(str(path))


async def test_a_missing_provider_names_the_installed_ones(
    ctx: Context, parent: Agent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_provider(tmp_path, monkeypatch, "ghostly")
    runtime = SubagentRuntime.of(ctx)
    runtime.register_provider(ScriptedProvider("x"))
    with pytest.raises(SubagentError) as info:
        await runtime.start("phantom", request(parent))
    assert info.value.code == "NO_PROVIDER"
    message = str(info.value)
    assert message.startswith(
        'no subagent provider registered for "phantom": use a registered provider ("x");'
        " installed, not loaded (add its [[plugin]] row): "
    )
    assert '"ghostly" (plugin "dsh-ghostly")' in message


async def test_an_installed_provider_without_its_row_names_the_row(
    ctx: Context, parent: Agent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_provider(tmp_path, monkeypatch, "ghostly")
    with pytest.raises(SubagentError) as info:
        await SubagentRuntime.of(ctx).start("ghostly", request(parent))
    assert info.value.code == "NO_PROVIDER"
    assert str(info.value) == (
        'no subagent provider registered for "ghostly": provider "ghostly" is installed:'
        ' add a [[plugin]] row with name = "dsh-ghostly"'
    )


@pytest.mark.parametrize(
    ("capability", "fields"),
    [
        ("output_schema", {"output_schema": {"type": "object"}}),
        ("depth_limit", {"max_depth": 2}),
        ("tool_filter", {"tool_filter": ToolFilter(allow=())}),
        ("persona", {"persona": "a pirate"}),
    ],
)
async def test_each_capability_is_rejected_before_start(
    ctx: Context, parent: Agent, capability: str, fields: dict[str, object]
) -> None:
    seen = record(ctx)
    provider = ScriptedProvider("plain", capabilities=NO_START_CAPABILITIES)
    SubagentRuntime.of(ctx).register_provider(provider)
    with pytest.raises(SubagentError) as info:
        await SubagentRuntime.of(ctx).start("plain", request(parent, **fields))
    assert info.value.code == "UNSUPPORTED_CAPABILITY"
    assert (
        str(info.value)
        == f'subagent provider "plain" does not support the "{capability}" capability'
    )
    assert provider.starts == []  # start never ran
    assert [e.type for e in seen if e.type.startswith("subagent/s") or e.type == EVENT_END] == []


async def test_gate_order_names_the_first_missing_capability(ctx: Context, parent: Agent) -> None:
    everything = {
        "output_schema": {"type": "object"},
        "max_depth": 2,
        "tool_filter": ToolFilter(),
        "persona": "p",
        "budget": Budget(tokens=10),
    }
    order = ["output_schema", "depth_limit", "tool_filter", "persona", "budget"]
    for index, name in enumerate(order):
        caps = SubagentCapabilities(**{c: c in order[:index] for c in order})
        provider = ScriptedProvider(f"p{index}", capabilities=caps)
        SubagentRuntime.of(ctx).register_provider(provider)
        with pytest.raises(SubagentError, match=f'"{name}" capability'):
            await SubagentRuntime.of(ctx).start(provider.name, request(parent, **everything))
        assert provider.starts == []


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"max_depth": -1}, "max_depth must be a non-negative integer, got -1"),
        ({"max_depth": True}, "max_depth must be a non-negative integer, got True"),
        ({"max_depth": "3"}, "max_depth must be a non-negative integer, got '3'"),
        ({"output_schema": {"type": "array"}}, "output_schema must be object-rooted"),
        ({"output_schema": ["x"]}, "output_schema must be a JSON Schema object, got list"),
        (
            {"output_schema": {"type": "object", "properties": {"a": {"type": 12}}}},
            "output_schema is not a valid JSON Schema at properties/a/type",
        ),
        ({"budget": {"tokens": 5}}, "budget must be a dsh.subagent.Budget, got dict"),
    ],
)
async def test_invalid_requests_are_refused_naming_the_value(
    ctx: Context, parent: Agent, fields: dict[str, object], message: str
) -> None:
    provider = ScriptedProvider("full", capabilities=ALL_START_CAPABILITIES)
    SubagentRuntime.of(ctx).register_provider(provider)
    with pytest.raises(SubagentError, match=message) as info:
        await SubagentRuntime.of(ctx).start("full", request(parent, **fields))
    assert info.value.code == "INVALID_REQUEST"
    assert provider.starts == []


async def test_depth_is_checked_and_inherited_limits_cannot_be_raised(
    ctx: Context, parent: Agent
) -> None:
    runtime = SubagentRuntime.of(ctx)
    runtime.register_provider(ScriptedProvider("full", capabilities=ALL_START_CAPABILITIES))
    child = ctx.agents.create(parent=parent, meta={"max_depth": 1})
    assert child.depth == 1
    with pytest.raises(SubagentError) as info:
        await runtime.start("full", request(child, max_depth=1))
    assert info.value.code == "DEPTH_EXCEEDED"
    assert str(info.value) == "subagent depth 2 exceeds max_depth 1"
    # a bigger max_depth in the request does not lift the limit the child inherited
    with pytest.raises(SubagentError, match="subagent depth 2 exceeds max_depth 1"):
        await runtime.start("full", request(child, max_depth=10))
    # nor does leaving it out
    with pytest.raises(SubagentError, match="subagent depth 2 exceeds max_depth 1"):
        await runtime.start("full", request(child))
    run = await runtime.start("full", request(parent, max_depth=1))
    async with run:
        assert (await run.result).ok


async def test_abort_before_publication_raises_and_emits_nothing(
    ctx: Context, parent: Agent
) -> None:
    seen = record(ctx)
    provider = ScriptedProvider("s")
    SubagentRuntime.of(ctx).register_provider(provider)
    signal = AbortSignal()
    signal.abort("user hit escape")
    with pytest.raises(SubagentError) as info:
        await SubagentRuntime.of(ctx).start("s", SubagentStartRequest("x", parent, signal))
    assert info.value.code == "ABORTED"
    assert str(info.value) == "subagent start aborted: user hit escape"
    assert provider.starts == []
    assert [e.type for e in seen if e.type in (EVENT_START, EVENT_END)] == []


async def test_start_failure_emits_nothing(ctx: Context, parent: Agent) -> None:
    seen = record(ctx)
    provider = ScriptedProvider("s", start_error=SubagentError("could not start x", "START_FAILED"))
    SubagentRuntime.of(ctx).register_provider(provider)
    with pytest.raises(SubagentError, match="could not start x"):
        await SubagentRuntime.of(ctx).start("s", request(parent))
    assert [e.type for e in seen if e.type in (EVENT_START, EVENT_END)] == []


async def test_start_then_exactly_one_end_scoped_to_the_parent(ctx: Context, parent: Agent) -> None:
    other = ctx.agents.create(label="other")
    mine: list[BusEvent] = []
    theirs: list[BusEvent] = []
    ctx.events.on(EVENT_START, mine.append, scope=parent.id)
    ctx.events.on(EVENT_END, mine.append, scope=parent.id)
    ctx.events.on(EVENT_END, theirs.append, scope=other.id)
    SubagentRuntime.of(ctx).register_provider(
        ScriptedProvider("s", reply="ok", usage={"input_tokens": 3, "output_tokens": 1})
    )
    run = await SubagentRuntime.of(ctx).start("s", request(parent, label="job"))
    async with run:
        result = await run.result
        assert await run.result is result  # awaitable more than once
    assert [e.type for e in mine] == [EVENT_START, EVENT_END]
    assert mine[0].data == {
        "run_id": run.id,
        "provider": "s",
        "parent_agent": parent.id,
        "label": "job",
        "depth": 1,
    }
    assert mine[1].data["stop_reason"] == "completed"
    assert mine[1].data["usage"] == {"input_tokens": 3, "output_tokens": 1}
    assert theirs == []


async def test_result_raising_is_reported_as_error_end(ctx: Context, parent: Agent) -> None:
    seen = record(ctx)
    SubagentRuntime.of(ctx).register_provider(
        ScriptedProvider("s", result_error=RuntimeError("transport exploded"))
    )
    run = await SubagentRuntime.of(ctx).start("s", request(parent))
    with pytest.raises(RuntimeError, match="transport exploded"):
        await run.result
    await run.dispose()
    ends = [e for e in seen if e.type == EVENT_END]
    assert len(ends) == 1
    assert ends[0].data["stop_reason"] == "error"
    assert ends[0].data["diagnostic"] == "RuntimeError: transport exploded"


async def test_failing_listener_is_logged_and_never_affects_the_run(
    ctx: Context, parent: Agent, caplog: pytest.LogCaptureFixture
) -> None:
    def explode(event: BusEvent) -> None:
        raise ValueError("listener bug")

    later: list[str] = []
    ctx.events.on(EVENT_START, explode)
    ctx.events.on(EVENT_END, explode)
    ctx.events.on(EVENT_END, lambda e: later.append(e.type))
    SubagentRuntime.of(ctx).register_provider(ScriptedProvider("s", reply="fine"))
    with caplog.at_level(logging.ERROR):
        run = await SubagentRuntime.of(ctx).start("s", request(parent))
        async with run:
            result = await run.result
    assert result.output == "fine"
    assert later == [EVENT_END]
    assert (
        sum(
            "listener bug" in r.getMessage() or "listener" in r.getMessage() for r in caplog.records
        )
        >= 2
    )


async def test_provider_removed_while_a_run_is_live(ctx: Context, parent: Agent) -> None:
    gate = anyio.Event()
    provider = ScriptedProvider("s", reply="survived", gate=gate)
    runtime = SubagentRuntime.of(ctx)
    remove = runtime.register_provider(provider)
    run = await runtime.start("s", request(parent))
    remove()
    assert runtime.list() == []
    assert not run.settled
    gate.set()
    async with run:
        result = await run.result
    assert result.output == "survived"
    with pytest.raises(SubagentError, match="no subagent provider"):
        await runtime.start("s", request(parent))


async def test_cancel_after_publication_and_dispose_idempotent(ctx: Context, parent: Agent) -> None:
    provider = ScriptedProvider("s")
    runtime = SubagentRuntime.of(ctx)
    runtime.register_provider(provider)
    signal = AbortSignal()
    run = await runtime.start("s", SubagentStartRequest(HANG_PROMPT, parent, signal))
    await anyio.sleep(0.01)
    signal.abort("stop now")
    result = await run.result
    assert result.stop_reason == "aborted"
    assert result.diagnostic == "stop now"
    await run.dispose()
    await run.dispose()
    assert provider.disposals == 1
    assert runtime.live_runs() == []


async def test_context_close_disposes_live_runs() -> None:
    provider = ScriptedProvider("s")
    async with Context.open(parse_preset('[agent.model]\nadapter = "scripted"\n')) as ctx:
        runtime = SubagentRuntime.of(ctx)
        runtime.register_provider(provider)
        run = await runtime.start("s", request(ctx.agents.create(), HANG_PROMPT))
        assert runtime.live_runs() == [run]
    assert run.disposed
    assert provider.live == 0
    assert (await run.result).stop_reason == "aborted"


def test_result_diagnostic_is_capped_on_a_character_boundary() -> None:
    long = "é" * 5000  # 2 bytes each
    result = SubagentResult("", "error", diagnostic=long)
    assert result.diagnostic is not None
    data = result.diagnostic.encode()
    assert len(data) <= 4096
    assert result.diagnostic.endswith("\n[diagnostic truncated]")
    assert result.diagnostic.startswith("é" * 100)
    emoji = SubagentResult("", "error", diagnostic="a" + "🙂" * 2000)
    assert emoji.diagnostic is not None
    assert len(emoji.diagnostic.encode()) <= 4096
    short = SubagentResult("", "error", diagnostic="é" * 2000)  # 4000 bytes: kept whole
    assert short.diagnostic == "é" * 2000


def test_request_wraps_a_string_prompt() -> None:
    class FakeParent:
        pass

    req = SubagentStartRequest("hello", FakeParent(), AbortSignal())  # type: ignore[arg-type]
    assert req.prompt == [{"type": "text", "text": "hello"}]
    assert req.prompt_text == "hello"
    with pytest.raises(TypeError, match="content block 0"):
        SubagentStartRequest([42], FakeParent(), AbortSignal())  # type: ignore[list-item,arg-type]


async def test_a_budgeted_tree_refuses_a_provider_that_cannot_enforce_it(
    ctx: Context, parent: Agent
) -> None:
    remote = ScriptedProvider("remote", capabilities=NO_START_CAPABILITIES)
    runtime = SubagentRuntime.of(ctx)
    runtime.register_provider(remote)
    with pytest.raises(SubagentError) as asked:
        await runtime.start("remote", request(parent, budget=Budget(tokens=100)))
    assert str(asked.value) == 'subagent provider "remote" does not support the "budget" capability'
    lift = runtime.budget_tree(parent, Budget(tokens=1000))
    try:
        with pytest.raises(SubagentError) as inherited:
            await runtime.start("remote", request(parent))
    finally:
        lift()
    for info in (asked, inherited):
        assert info.value.code == "UNSUPPORTED_CAPABILITY"
    assert "the delegation tree has a budget it could not enforce" in str(inherited.value)
    assert remote.starts == []
    assert runtime.live_runs() == []
    # without the tree budget the same start runs
    async with await runtime.start("remote", request(parent)) as run:
        assert (await run.result).ok
