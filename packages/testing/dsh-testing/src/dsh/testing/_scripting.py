"""The code behind :mod:`dsh.testing.scripting` (its docstring says what it is)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from dsh.core import ModelRequest, ScriptedAdapter, ScriptedReply, ScriptedToolCall, text_of
from dsh.core.models import BoundModel

__all__ = ["call", "last_user_text", "model", "prompt_behaviour_model", "steps_in_turn"]


def last_user_text(request: ModelRequest) -> str:
    """Text of the latest user message in the request."""
    for event in reversed(request.events):
        if event.type == "user/message":
            return text_of(event.data.get("content"))
    return ""


def steps_in_turn(request: ModelRequest) -> int:
    """Model calls already made in the request's current turn (a cut-off turn taken up
    again counts on from its first start)."""
    steps = 0
    for event in reversed(request.events):
        if event.type == "turn/start" and not event.data.get("resumed"):
            return steps
        steps += event.type == "assistant/message"
    return steps


def model(fn: Callable[[ModelRequest], ScriptedReply | Awaitable[ScriptedReply]]) -> BoundModel:
    """A scripted model answering with ``fn(request)`` (a function or a coroutine
    function); it records its requests."""
    adapter = ScriptedAdapter(fn)
    adapter.record_requests = True
    return BoundModel(adapter)


def call(name: str, **arguments: object) -> ScriptedToolCall:
    """A scripted tool call."""
    return ScriptedToolCall(name=name, arguments=dict(arguments))


def prompt_behaviour_model(
    *, hang: str = "hang", fail: str = "fail", reply: str = "done: {prompt}"
) -> BoundModel:
    """A model that hangs on prompt ``hang``, fails on ``fail``, else replies ``reply``.

    What conformance harnesses of in-process providers drive children with.
    """

    def script(request: ModelRequest) -> ScriptedReply:
        text = last_user_text(request)
        if text == hang:
            return ScriptedReply(hang=True)
        if text == fail:
            return ScriptedReply(error="scripted model failure")
        return ScriptedReply(text=reply)

    return model(script)
