"""A persisted session survives text that cannot be encoded as UTF-8 (a lone UTF-16
surrogate, as ``json.loads`` gives for ``"\\ud83d"``): the event is written as valid
UTF-8 JSON and loads back unchanged."""

from __future__ import annotations

import json
from pathlib import Path

from dsh.core import SessionStore
from dsh.core.sessions import SessionHeader


def test_a_lone_surrogate_is_written_as_an_escape_and_loads_back(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    session = store.create(SessionHeader("s1"))
    text = "hi \ud83d and é"
    session.append("user/message", {"content": [{"type": "text", "text": text}]})
    session.append("user/message", {"content": [{"type": "text", "text": "next"}]})
    session.close()
    lines = (tmp_path / "s1.jsonl").read_bytes().splitlines()
    assert len(lines) == 3  # the header and both events
    for line in lines:
        json.loads(line.decode("utf-8"))  # valid UTF-8, valid JSON
    loaded = store.load("s1")
    assert loaded.torn_tail is None
    assert [e.data["content"][0]["text"] for e in loaded.events] == [text, "next"]
