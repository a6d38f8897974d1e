"""Continuable children at the runtime level with the in-process provider hook
(real runtime and loop, scripted models): acceptance, persistence of scope,
forks, and every refusal code."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from dsh.core import (
    AbortSignal,
    Agent,
    Context,
    ModelRequest,
    ScriptedReply,
    Tool,
    ToolContext,
    parse_preset,
    text_of,
)
from dsh.subagent import (
    ALL_START_CAPABILITIES,
    NOTICE_SETTLED,
    SubagentError,
    SubagentRuntime,
    SubagentStartRequest,
    ToolFilter,
)
from dsh.subagent._activation_lock import ActivationLock  # a lock held by "another process"
from dsh.subagent_in_process_driver import DELEGATION_SECTION, DESCRIPTOR_EVENT, InProcessProvider
from dsh.testing.scripted_provider import ScriptedProvider
from dsh.testing.scripting import last_user_text, model

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(15)]

SPEC_EVENT = "subagent/continuable"  # the child's re-activation record
CHILD_EVENT = "subagent/child"  # the parent's record of a continuable child

PRESET = parse_preset('[agent.model]\nadapter = "scripted"\n')

REQUESTS: list[ModelRequest] = []


def behaviour(request: ModelRequest) -> ScriptedReply:
    """Hang on "hang", else answer "done: <prompt>"; children's requests are recorded."""
    if DELEGATION_SECTION in request.system:
        REQUESTS.append(request)
    if last_user_text(request) == "hang":
        return ScriptedReply(hang=True)
    return ScriptedReply(text="done: {prompt}")


class NoArgs(BaseModel):
    pass


async def noop(args: NoArgs, tctx: ToolContext) -> str:
    return "ok"


@pytest.fixture
async def ctx(tmp_path: Path) -> AsyncIterator[Context]:
    REQUESTS.clear()
    async with Context.open(PRESET, sessions_dir=tmp_path) as ctx:
        runtime = SubagentRuntime.of(ctx)
        runtime.register_provider(InProcessProvider("spawn", fork=False))
        runtime.register_provider(InProcessProvider("fork", fork=True))
        for name in ("alpha", "beta"):
            ctx.tools.register(Tool.from_model(name, name, NoArgs, noop))
        yield ctx


def request(parent: Agent, prompt: str = "task", **fields: Any) -> SubagentStartRequest:
    return SubagentStartRequest(prompt, parent, fields.pop("signal", AbortSignal()), **fields)


async def until(predicate: Any, timeout: float = 5) -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.002)


async def code_of(awaitable: Any) -> tuple[str, str]:
    with pytest.raises(SubagentError) as info:
        await awaitable
    return info.value.code, info.value.message


async def test_start_returns_once_the_first_message_is_accepted_and_on_disk(
    ctx: Context, tmp_path: Path
) -> None:
    runtime = SubagentRuntime.of(ctx)
    parent = ctx.agents.create(model=model(behaviour))
    child = await runtime.start_continuable("spawn", request(parent, "hang", label="watcher"))
    assert child.status == "running"
    assert child.parent_id == parent.id
    assert child.depth == 1
    assert child.agent is not None
    types = [e.type for e in child.agent.session.events]
    assert types[:4] == [DESCRIPTOR_EVENT, SPEC_EVENT, "user/message", "turn/start"]
    on_disk = [
        json.loads(line) for line in (tmp_path / f"{child.id}.jsonl").read_text().splitlines()
    ]
    assert on_disk[0]["parent_session"] == parent.id
    assert on_disk[3]["type"] == "user/message"
    assert on_disk[3]["data"]["content"] == [{"type": "text", "text": "hang"}]
    assert on_disk[1]["data"]["continuable"] is True
    assert on_disk[2]["data"] == {
        "agent_id": child.id,
        "provider": "spawn",
        "parent_agent": parent.id,
        "label": "watcher",
        "persona": None,
        "tool_filter": None,
        "agent_options": None,
        "max_depth": None,
    }
    (record,) = [e.data for e in parent.session.events if e.type == CHILD_EVENT]
    assert record == {
        "agent_id": child.id,
        "provider": "spawn",
        "parent_agent": parent.id,
        "label": "watcher",
    }
    assert child.agent.running
    await child.agent.aclose()
    assert child.agent is None
    assert not (tmp_path / f"{child.id}.lock").read_text()  # released


async def test_an_aborted_start_leaves_nothing(ctx: Context) -> None:
    runtime = SubagentRuntime.of(ctx)
    parent = ctx.agents.create(model=model(behaviour))
    signal = AbortSignal()
    signal.abort("user pressed escape")
    code, message = await code_of(
        runtime.start_continuable("spawn", request(parent, signal=signal))
    )
    assert (code, message) == ("ABORTED", "subagent start aborted: user pressed escape")
    assert ctx.agents.list() == [parent]
    assert runtime.continuable.live() == []


async def test_a_resumed_child_keeps_its_persona_filter_and_options(ctx: Context) -> None:
    runtime = SubagentRuntime.of(ctx)
    parent = ctx.agents.create(model=model(behaviour))
    child = await runtime.start_continuable(
        "spawn",
        request(
            parent,
            "first",
            persona="You are a terse reviewer.",
            tool_filter=ToolFilter(allow=("alpha",)),
            agent_options={"max_steps": 4},
            max_depth=2,
        ),
    )
    await until(lambda: child.status == "settled")
    assert child.agent is not None
    assert child.agent.max_steps == 4
    await runtime.continuable.drain_children_of(parent.id)
    assert child.agent is None
    _, how = await runtime.continuable.send_message(parent, child.id, "second")
    assert how == "resumed"
    await until(lambda: child.status == "settled" and child.turns == 2)
    first, second = REQUESTS[-2:]
    for seen in (first, second):
        assert "You are a terse reviewer." in seen.system
        assert DELEGATION_SECTION in seen.system
        assert [t.name for t in seen.tools] == ["alpha"]
    assert child.agent is not None
    assert child.agent.max_steps == 4
    assert child.agent.session.header.meta["max_depth"] == 2
    assert child.last_output == "done: second"


async def test_a_continuable_fork_starts_from_the_parents_completed_turns(ctx: Context) -> None:
    runtime = SubagentRuntime.of(ctx)
    parent = ctx.agents.create(model=model(behaviour))
    await parent.run("earlier work")
    child = await runtime.start_continuable("fork", request(parent, "go on"))
    await until(lambda: child.status == "settled")
    assert child.agent is not None
    seed = child.agent.session.header.meta["seed_length"]
    assert seed == 4
    assert child.turns == 1  # the seed's turn is the parent's, not the child's
    await runtime.continuable.drain_children_of(parent.id)
    await runtime.continuable.send_message(parent, child.id, "and more")
    await until(lambda: child.turns == 2 and child.status == "settled")
    users = [text_of(e.data["content"]) for e in REQUESTS[-1].events if e.type == "user/message"]
    assert users[:3] == ["earlier work", "go on", "and more"]


async def test_refusals_name_the_agent_and_carry_their_codes(ctx: Context, tmp_path: Path) -> None:
    runtime = SubagentRuntime.of(ctx)
    continuable = runtime.continuable
    runtime.register_provider(ScriptedProvider("oneshot", capabilities=ALL_START_CAPABILITIES))
    parent = ctx.agents.create(model=model(behaviour))

    code, message = await code_of(runtime.start_continuable("oneshot", request(parent)))
    assert code == "CONTINUATION_UNAVAILABLE"
    assert message.startswith('subagent provider "oneshot" cannot run continuable children')
    code, _ = await code_of(
        runtime.start_continuable("spawn", request(parent, output_schema={"type": "object"}))
    )
    assert code == "INVALID_REQUEST"

    child = await runtime.start_continuable("spawn", request(parent, "first"))
    await until(lambda: child.status == "settled")

    code, message = await code_of(continuable.send_message(parent, "0" * 32, "hi"))
    assert code == "NOT_RESUMABLE"
    assert message.startswith(f'subagent "{"0" * 32}" cannot be resumed: no stored session')
    code, message = await code_of(continuable.send_message(child.agent, parent.id, "hi"))
    assert code == "NOT_RESUMABLE"
    assert message == f'"{parent.id}" is not a continuable subagent (its session has no' + (
        f" {SPEC_EVENT} record)"
    )

    # another process holds the child's activation
    await continuable.drain_children_of(parent.id)
    other = ActivationLock(tmp_path / f"{child.id}.lock")
    assert other.try_acquire() is None
    try:
        code, message = await code_of(continuable.send_message(parent, child.id, "hi"))
    finally:
        other.release()
    assert code == "DUPLICATE_CHILD"
    assert message.startswith(f'subagent "{child.id}" already has a live activation in another')
    assert f"(pid {os.getpid()})" in message

    # live in this process outside the registry
    rogue = ctx.agents.resume(child.id)
    code, message = await code_of(continuable.send_message(parent, child.id, "hi"))
    assert code == "DUPLICATE_CHILD"
    await rogue.aclose()

    # its provider is gone
    remove = runtime.register_provider(InProcessProvider("temporary", fork=False))
    temp = await runtime.start_continuable("temporary", request(parent, "first"))
    await until(lambda: temp.status == "settled")
    await continuable.drain_children_of(parent.id)
    remove()
    code, message = await code_of(continuable.send_message(parent, temp.id, "hi"))
    assert code == "CONTINUATION_UNAVAILABLE"
    assert message.startswith(
        f'subagent "{temp.id}" was started by provider "temporary", which is not registered'
    )

    # a report from an agent that is not a continuable child
    with pytest.raises(SubagentError) as info:
        continuable.report(parent, "hello")
    assert info.value.code == "UNAUTHORIZED"

    # draining: the context's runtime is shutting down
    await runtime.aclose()
    code, _ = await code_of(continuable.send_message(parent, child.id, "hi"))
    assert code == "DRAINING"
    code, _ = await code_of(runtime.start_continuable("spawn", request(parent)))
    assert code == "DRAINING"


async def test_without_a_session_store_a_drained_child_is_not_resumable() -> None:
    async with Context.open(PRESET) as ctx:
        runtime = SubagentRuntime.of(ctx)
        runtime.register_provider(InProcessProvider("spawn", fork=False))
        parent = ctx.agents.create(model=model(behaviour))
        child = await runtime.start_continuable("spawn", request(parent, "first"))
        await until(lambda: child.status == "settled")
        assert child.agent is not None
        assert not child.agent.session.persisted
        _, how = await runtime.continuable.send_message(parent, child.id, "again")
        assert how == "woken"
        await until(lambda: child.turns == 2 and child.status == "settled")
        await runtime.continuable.drain_children_of(parent.id)
        code, message = await code_of(runtime.continuable.send_message(parent, child.id, "hi"))
        assert code == "NOT_RESUMABLE"
        assert "keeps no sessions on disk" in message
        listed = runtime.continuable.list(parent)
        assert [(c.id, c.status, c.last_output) for c in listed] == [
            (child.id, "settled", "done: again")
        ]


async def test_interrupt_before_the_turn_began_keeps_later_messages(ctx: Context) -> None:
    runtime = SubagentRuntime.of(ctx)
    parent = ctx.agents.create(model=model(behaviour))
    child = await runtime.start_continuable("spawn", request(parent, "hang"))
    await runtime.continuable.send_message(parent, child.id, "next")
    assert child.queued == 1
    record, was_running = await runtime.continuable.interrupt(parent, child.id)
    assert was_running
    assert record.status == "idle"
    assert record.queued == 1
    await until(lambda: not parent.running)
    settles = [
        e.data["source"]
        for e in parent.session.events
        if e.type == "user/message" and e.data.get("source", {}).get("type") == NOTICE_SETTLED
    ]
    assert [s["status"] for s in settles] == ["idle"]
    _, how = await runtime.continuable.send_message(parent, child.id, "last")
    assert how == "woken"
    await until(lambda: child.turns == 3 and child.status == "settled")
    assert child.last_output == "done: last"
    assert [
        text_of(e.data["content"]) for e in child.agent.session.events if e.type == "user/message"
    ] == ["hang", "next", "last"]  # type: ignore[union-attr]


async def test_closing_the_context_drains_every_child_and_leaves_no_task(tmp_path: Path) -> None:
    before = {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}
    async with Context.open(PRESET, sessions_dir=tmp_path) as ctx:
        runtime = SubagentRuntime.of(ctx)
        runtime.register_provider(InProcessProvider("spawn", fork=False))
        parent = ctx.agents.create(model=model(behaviour))
        children = [
            await runtime.start_continuable("spawn", request(parent, "hang")) for _ in range(3)
        ]
    assert all(c.agent is None for c in children)
    assert all(c.status == "idle" for c in children)
    assert {t for t in asyncio.all_tasks() if t is not asyncio.current_task()} <= before
    assert not any(
        e.type == "user/message" and e.data.get("kind") == "notice" for e in parent.session.events
    )
