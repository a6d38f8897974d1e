"""``ToolKeys``: a tool call's tape key read incrementally gives what ``tool_key``
gives reading the whole log, call after call, and starts over on another log."""

from __future__ import annotations

from dsh.core._tool_tape import ToolKeys
from dsh.core.sessions import Event
from dsh.core.tapes import tool_key


def _event(seq: int, type: str, text: str = "") -> Event:
    return Event(seq, type, {"content": [{"type": "text", "text": text}]}, 0.0)


def test_incremental_keys_match_reading_the_whole_log() -> None:
    keys = ToolKeys()
    log: list[Event] = []
    seen: list[tuple[str, int]] = []
    script = [
        ("user/message", ""),  # an empty first user message: the next one names the agent
        ("user/message", "task"),
        ("assistant/message", "calling"),
        ("tool/result", ""),
        ("assistant/message", "again"),
        ("user/message", "later"),
        ("assistant/message", "done"),
    ]
    for index, (kind, text) in enumerate(script):
        log.append(_event(index, kind, text))
        found = keys.key("system", log)
        assert found == tool_key("system", log)
        seen.append(found)
    assert [call for _, call in seen] == [0, 0, 0, 0, 1, 1, 2]
    assert len({conversation for conversation, _ in seen[1:]}) == 1
    assert seen[0][0] != seen[1][0]  # no user text yet, then "task"
    assert keys.key("another prompt", log) == tool_key("another prompt", log)

    other = [_event(0, "user/message", "other task")]
    assert keys.key("system", other) == tool_key("system", other)
    assert keys.key("system", log) == tool_key("system", log)  # back: read again
