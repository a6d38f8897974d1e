"""dsh session events -> chat-completions messages and tools.

* ``user/message`` -> a ``user`` message (text blocks joined; consecutive user
  messages merge, as some servers reject two in a row);
* ``assistant/message`` + the ``tool/call`` events after it -> one ``assistant``
  message with ``tool_calls``, followed by one ``tool`` message per call, in call
  order, from the ``tool/result`` events. A call whose result never came (a
  cancelled turn) gets a placeholder result, and a result that answers no call is
  dropped, so the history is always one the API accepts;
* every other event type is ignored.

The system prompt goes first, as a ``system`` message.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dsh.core.models import ToolSpec
from dsh.core.sessions import Event

__all__ = ["INTERRUPTED_RESULT", "chat_messages", "plain", "tool_definitions"]

INTERRUPTED_RESULT = "(no result: the tool call was interrupted before it finished)"
"""What the model is told for a tool call whose result is missing from the session."""


def plain(value: Any) -> Any:
    """``value`` with every mapping as a ``dict`` and every sequence as a ``list`` (JSON-ready)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, Sequence):
        return ""
    texts = [
        str(block.get("text", ""))
        for block in content
        if isinstance(block, Mapping) and block.get("type") == "text"
    ]
    return "\n".join(text for text in texts if text)


@dataclass(slots=True)
class _Step:
    """An assistant message waiting for its calls and their results."""

    text: str
    calls: list[dict[str, Any]] = field(default_factory=list)
    results: dict[str, str] = field(default_factory=dict)

    def emit(self, into: list[dict[str, Any]]) -> None:
        message: dict[str, Any] = {"role": "assistant", "content": self.text}
        if self.calls:
            message["tool_calls"] = self.calls
        into.append(message)
        for call in self.calls:
            result = self.results.get(call["id"], INTERRUPTED_RESULT)
            into.append({"role": "tool", "tool_call_id": call["id"], "content": result})


def chat_messages(system: str, events: Sequence[Event]) -> list[dict[str, Any]]:
    """The ``messages`` of a chat-completions request for a session's events."""
    messages: list[dict[str, Any]] = []
    if system:
        messages.append({"role": "system", "content": system})
    step: _Step | None = None
    for event in events:
        kind, data = event.type, event.data
        if kind == "user/message":
            if step is not None:
                step.emit(messages)
                step = None
            text = _text(data.get("content"))
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "user":
                last["content"] = f"{last['content']}\n\n{text}" if last["content"] else text
            else:
                messages.append({"role": "user", "content": text})
        elif kind == "assistant/message":
            if step is not None:
                step.emit(messages)
            step = _Step(_text(data.get("content")))
        elif kind == "tool/call":
            if step is None:
                step = _Step("")
            arguments = json.dumps(plain(data.get("arguments") or {}), ensure_ascii=False)
            step.calls.append(
                {
                    "id": str(data.get("id", "")),
                    "type": "function",
                    "function": {"name": str(data.get("name", "")), "arguments": arguments},
                }
            )
        elif kind == "tool/result" and step is not None:
            call_id = str(data.get("call_id", ""))
            if any(call["id"] == call_id for call in step.calls):
                text = _text(data.get("content"))
                step.results[call_id] = f"Error: {text}" if data.get("is_error") else text
    if step is not None:
        step.emit(messages)
    return messages


def tool_definitions(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """The ``tools`` of a request: one ``function`` definition per tool spec."""
    definitions: list[dict[str, Any]] = []
    for spec in tools:
        parameters = plain(spec.parameters) or {"type": "object", "properties": {}}
        function = {"name": spec.name, "description": spec.description, "parameters": parameters}
        definitions.append({"type": "function", "function": function})
    return definitions
