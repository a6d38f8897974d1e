"""Sessions persist as JSONL, survive a torn write, and share seeds by reference."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsh.core import Context, Session, SessionStore, parse_preset
from dsh.core.sessions import SessionError, SessionHeader

pytestmark = pytest.mark.anyio


def test_jsonl_round_trip(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    session = store.create(SessionHeader("s1", parent_session="p0", meta={"cwd": "/w"}))
    for i in range(5):
        session.append("user/message", {"content": [{"type": "text", "text": f"m{i}"}]})
    session.close()
    loaded = store.load("s1")
    assert loaded.torn_tail is None
    assert loaded.header.parent_session == "p0"
    assert loaded.header.meta == {"cwd": "/w"}
    assert [e.seq for e in loaded.events] == [0, 1, 2, 3, 4]
    assert loaded.events[3].data["content"][0]["text"] == "m3"


def test_truncated_mid_line_loads_every_complete_event_and_reports_the_tail(
    tmp_path: Path,
) -> None:
    store = SessionStore(tmp_path)
    session = store.create(SessionHeader("crash"))
    for i in range(10):
        session.append("user/message", {"content": [{"type": "text", "text": f"message {i}"}]})
    session.close()
    path = store.path_for("crash")
    full = path.read_bytes()
    lines = full.splitlines(keepends=True)
    cut = len(full) - len(lines[-1]) // 2  # crash halfway through writing the last event
    path.write_bytes(full[:cut])

    loaded = store.load("crash")
    assert [e.seq for e in loaded.events] == list(range(9))
    assert loaded.torn_tail is not None
    assert loaded.torn_tail.offset == len(full) - len(lines[-1])
    assert loaded.torn_tail.length == cut - loaded.torn_tail.offset

    # resuming cuts the torn tail off so the next append lands on a clean line
    resumed, torn = store.resume("crash")
    assert torn == loaded.torn_tail
    resumed.append("user/message", {"content": []})
    resumed.close()
    again = store.load("crash")
    assert again.torn_tail is None
    assert [e.seq for e in again.events] == list(range(10))


def test_corruption_before_the_tail_is_an_error_not_silent_loss(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    session = store.create(SessionHeader("bad"))
    session.append("a", {})
    session.append("b", {})
    session.close()
    path = store.path_for("bad")
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(lines[0] + b"{garbage\n" + lines[2])
    with pytest.raises(SessionError, match="line 2 is not a JSON object"):
        store.load("bad")
    with pytest.raises(SessionError, match="no stored session 'nope'"):
        store.load("nope")
    with pytest.raises(SessionError, match="invalid session id"):
        store.path_for("../etc/passwd")


async def test_seed_is_shared_by_reference_and_written_as_a_reference(tmp_path: Path) -> None:
    preset = parse_preset('[agent.model]\nadapter = "scripted"\n')
    async with Context.open(preset, sessions_dir=tmp_path) as ctx:
        parent = ctx.agents.create()
        await parent.run("one")
        await parent.run("two")
        prefix = parent.session.completed_prefix()
        assert prefix[-1].type == "turn/end"
        child = ctx.agents.create(parent=parent, seed=prefix, seed_from=parent.id)
        assert child.session.events[0] is parent.session.events[0]  # same objects
        assert child.session.header.meta["seed_length"] == len(prefix)
        assert child.session.header.parent_session == parent.id
        assert child.depth == 1
        await child.run("three")
        child_id, child_len = child.id, len(child.session)
    # the child's file holds its header and its own events only
    lines = (tmp_path / f"{child_id}.jsonl").read_text().splitlines()
    assert len(lines) == 1 + child_len - len(prefix)
    loaded = SessionStore(tmp_path).load(child_id)
    assert [e.seq for e in loaded.events] == list(range(child_len))
    assert loaded.events[len(prefix)].type == "user/message"


async def test_persisted_agent_resumes_from_disk(tmp_path: Path) -> None:
    preset = parse_preset('[agent.model]\nadapter = "scripted"\n')
    async with Context.open(preset, sessions_dir=tmp_path) as ctx:
        agent = ctx.agents.create()
        await agent.run("first")
        agent_id = agent.id
    async with Context.open(preset, sessions_dir=tmp_path) as ctx:
        agent = ctx.agents.resume(agent_id)
        assert agent.turns == 1
        outcome = await agent.run("second")
        assert outcome.turn == 2
        assert agent.session.events[-2].data["content"][0]["text"] == "Done: second"


def test_seeded_log_behaves_like_a_list_without_copying_the_seed() -> None:
    parent = Session(SessionHeader("p"))
    for i in range(6):
        parent.append("turn/end" if i % 3 == 2 else "x", {"i": i})
    prefix = parent.completed_prefix()
    assert len(prefix) == 6
    child = Session(SessionHeader("c"), prefix)
    for i in range(3):
        child.append("own", {"i": 10 + i})
    reference = list(parent.events[:6]) + [e for e in child.events if e.type == "own"]
    log = child.events
    assert len(log) == 9
    assert list(log) == reference
    assert [log[i] for i in range(-9, 9)] == reference + reference
    assert log[2:7] == reference[2:7]
    assert log[::-1] == reference[::-1]
    assert list(reversed(log)) == reference[::-1]
    assert log[0] is parent.events[0]  # shared, not copied
    assert [e.seq for e in log] == list(range(9))
    with pytest.raises(IndexError):
        log[9]
    with pytest.raises(IndexError):
        log[-10]
    # the parent goes on; the child's view of the seed does not change
    parent.append("later", {})
    assert len(child.events) == 9
    assert child.completed_prefix()[-1].type == "turn/end"
    # a fork of a fork
    grandchild = Session(SessionHeader("g"), child.completed_prefix())
    assert len(grandchild.events) == 6
    assert list(grandchild.events) == reference[:6]


def test_prefix_of_a_log_without_turns_is_empty() -> None:
    session = Session(SessionHeader("s"))
    session.append("user/message", {})
    assert session.completed_prefix() == ()
