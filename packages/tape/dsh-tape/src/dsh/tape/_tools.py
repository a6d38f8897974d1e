"""Tool calls on the tape: the proxy's side of the tool route (``/<token>/t/tools``,
whose client is :class:`dsh.core.tapes.ToolTape`).

:class:`ToolBook` holds the recorded tool calls of a tape (replay and resume) and
says, for each call an agent is about to make, what to do: run it, run it and record
it, or take the recorded result; or that the call is not on the tape (a
:class:`~dsh.tape.Divergence` with label ``tool``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

from dsh.tape._format import (
    Divergence,
    canonical,
    match_key,
    needs_redaction,
    pretty,
    redact_value,
    similarity,
    to_json,
    unified_diff,
)

__all__ = ["TOOL_LABEL", "ToolBook", "tool_line", "tool_line_text"]

TOOL_LABEL = "tool"
"""The label of tool lines (``"kind": "tool"``) and of their divergences."""

_Key = tuple[str, int, str, str]


def _key(conversation: str, call: int, name: str, arguments: Any) -> _Key:
    return (conversation, call, name, match_key(arguments))


def tool_line(
    seq: int, version: int, call: dict[str, Any], *, redact: bool = True
) -> dict[str, Any]:
    """The tape line of a tool call with its result (``call`` as the route received
    it, redacted here unless ``redact`` is False)."""
    arguments, result = call.get("arguments"), call.get("result")
    return {
        "v": version,
        "seq": seq,
        "kind": "tool",
        "label": TOOL_LABEL,
        "conversation": str(call.get("conversation") or ""),
        "call": int(call.get("call") or 0),
        "name": str(call.get("name") or ""),
        "arguments": redact_value(arguments) if redact else arguments,
        "result": redact_value(result) if redact else result,
    }


def tool_line_text(seq: int, version: int, call: dict[str, Any]) -> str:
    """The JSON text of :func:`tool_line`: encoded as is when that shows nothing to
    redact (:func:`~dsh.tape._format.needs_redaction`, the common case), else redacted
    first. ``TypeError`` for a value JSON cannot hold."""
    text = to_json(tool_line(seq, version, call, redact=False))
    if needs_redaction(text):
        text = to_json(tool_line(seq, version, call))
    return text


class ToolBook:
    """The recorded tool calls of a tape, matched as agents ask (see the module)."""

    def __init__(self, lines: Iterable[dict[str, Any]] = ()) -> None:
        self._index: dict[_Key, deque[dict[str, Any]]] = {}
        self._unused: list[dict[str, Any]] = []
        self.answered = 0
        """Calls found on the tape."""
        for line in lines:
            key = _key(line["conversation"], line["call"], line["name"], line.get("arguments"))
            self._index.setdefault(key, deque()).append(line)
            self._unused.append(line)

    @property
    def remaining(self) -> int:
        """Recorded calls not asked for yet."""
        return len(self._unused)

    def take(self, call: dict[str, Any]) -> dict[str, Any] | None:
        """The recorded line of this call (removed from the book), or None."""
        key = _key(
            str(call.get("conversation") or ""),
            int(call.get("call") or 0),
            str(call.get("name") or ""),
            redact_value(call.get("arguments")),
        )
        queue = self._index.get(key)
        if not queue:
            return None
        line = queue.popleft()
        self._unused.remove(line)
        self.answered += 1
        return line

    def diverge(self, call: dict[str, Any]) -> Divergence:
        """Why ``call`` is not on the tape: a diff from the closest recorded call."""
        conversation = str(call.get("conversation") or "")
        number = int(call.get("call") or 0)
        name = str(call.get("name") or "")
        asked = {"name": name, "arguments": redact_value(call.get("arguments"))}
        same = [e for e in self._unused if e["conversation"] == conversation]
        same_call = [e for e in same if e["call"] == number]
        pool = same_call or same or self._unused
        if not pool:
            return Divergence(TOOL_LABEL, name, conversation, number, "")
        text = pretty(canonical(asked))

        def shown(line: dict[str, Any]) -> dict[str, Any]:
            return {"name": line["name"], "arguments": line.get("arguments")}

        closest = max(pool, key=lambda e: similarity(pretty(canonical(shown(e))), text))
        diff = unified_diff(shown(closest), asked)
        return Divergence(
            TOOL_LABEL, name, conversation, number, diff, closest_seq=closest.get("seq")
        )
