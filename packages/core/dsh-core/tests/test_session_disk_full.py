"""A full disk (a real one: a 64 KiB tmpfs filled to ENOSPC) never corrupts a session:
a refused append leaves the file byte for byte as it was and raises SessionError; a
turn ends ``error`` with that message; once there is room the next write saves what
was missing, and the session loads whole."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from dsh.core import Context, SessionStore, parse_preset
from dsh.core.sessions import SessionError, SessionHeader
from dsh.testing.disk import fill_up, small_tmpfs

pytestmark = pytest.mark.anyio

FULL = r"no space left on device while saving session .* the session file was left as it was"
CREATE = r"no space left on device while creating session child at .*; no session file was left"


def _text(i: int, size: int = 10) -> dict[str, object]:
    return {"content": [{"type": "text", "text": f"m{i} " + "x" * size}]}


def test_a_refused_append_leaves_the_file_as_it_was_and_is_saved_later(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "disk") as disk:
        store = SessionStore(disk / "sessions")
        session = store.create(SessionHeader("s1"))
        for i in range(3):
            session.append("user/message", _text(i))
        path = store.path_for("s1")
        before = path.read_bytes()
        filler = fill_up(disk)
        # bigger than what is left of the file's last page: part of it is written
        # (a short write), then ENOSPC; the part must be cut off again
        with pytest.raises(SessionError, match=FULL) as caught:
            session.append("user/message", _text(3, 8000))
        assert str(path) in str(caught.value)
        assert path.read_bytes() == before
        with pytest.raises(SessionError, match=FULL):
            session.append("user/message", _text(4, 8000))
        assert path.read_bytes() == before
        assert session.unsaved == 2
        assert len(session.events) == 5  # the log in memory has them
        loaded = store.load("s1")
        assert loaded.torn_tail is None
        assert [e.data for e in loaded.events] == [_text(i) for i in range(3)]

        filler.unlink()
        session.append("user/message", _text(5))
        assert session.unsaved == 0
        session.close()
        loaded = store.load("s1")
        assert loaded.torn_tail is None
        assert [e.seq for e in loaded.events] == list(range(6))
        assert [e.data for e in loaded.events] == [
            _text(0),
            _text(1),
            _text(2),
            _text(3, 8000),
            _text(4, 8000),
            _text(5),
        ]


def test_flush_saves_what_a_refused_append_left_out(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "disk") as disk:
        store = SessionStore(disk / "sessions")
        session = store.create(SessionHeader("s2"))
        filler = fill_up(disk)
        with pytest.raises(SessionError, match=FULL):
            session.append("user/message", _text(0, 8000))
        with pytest.raises(SessionError, match=FULL):
            session.flush()
        filler.unlink()
        session.flush()
        assert session.unsaved == 0
        assert [e.data for e in store.load("s2").events] == [_text(0, 8000)]
        session.close()


def test_a_session_whose_header_cannot_be_written_leaves_no_file(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "disk") as disk:
        store = SessionStore(disk / "sessions")
        filler = fill_up(disk)
        with pytest.raises(SessionError, match=CREATE):
            store.create(SessionHeader("child", meta={"pad": "x" * 8000}))
        assert not store.path_for("child").exists()
        assert store.ids() == []
        filler.unlink()
        store.create(SessionHeader("child")).close()  # the id is free again
        assert store.load("child").header.id == "child"


async def test_a_turn_on_a_full_disk_ends_error_and_the_conversation_survives(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    preset = parse_preset('[agent.model]\nadapter = "scripted"\n')
    with small_tmpfs(tmp_path / "disk", size="128k") as disk:
        async with Context.open(preset, sessions_dir=disk / "sessions") as ctx:
            agent = ctx.agents.create()
            assert (await agent.run("first")).stop_reason == "completed"
            filler = fill_up(disk)
            with caplog.at_level(logging.WARNING):
                outcome = await agent.run("second " + "y" * 8000)
            assert outcome.stop_reason == "error"
            assert outcome.error is not None
            assert "no space left on device while saving session" in outcome.error
            assert not [r for r in caplog.records if r.levelno >= logging.ERROR]  # no traceback
            filler.unlink()
            assert (await agent.run("third")).stop_reason == "completed"
            agent_id, events = agent.id, [(e.type, dict(e.data)) for e in agent.session.events]
        loaded = SessionStore(disk / "sessions").load(agent_id)
        assert loaded.torn_tail is None
        assert [(e.type, dict(e.data)) for e in loaded.events] == events
        ends = [e.data for e in loaded.events if e.type == "turn/end"]
        assert [end["stop_reason"] for end in ends] == ["completed", "error", "completed"]
        async with Context.open(preset, sessions_dir=disk / "sessions") as ctx:
            again = ctx.agents.resume(agent_id)
            assert again.turns == 3
