"""The code behind :mod:`dsh.testing.keyed_model` (its docstring says what it is)."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from dsh.core import (
    Context,
    EffectScope,
    ModelRequest,
    Plugin,
    ScriptedAdapter,
    ScriptedReply,
    text_of,
)
from dsh.core.models import ModelConfig
from dsh.core.plugins import NoConfig
from dsh.core.sessions import Event

__all__ = ["KeyedModelOptions", "KeyedRule", "keyed_factory", "plugin"]


class KeyedRule(BaseModel):
    """Replies used when the turn's user message contains ``contains``."""

    model_config = ConfigDict(extra="forbid")

    contains: str
    replies: list[ScriptedReply]


class KeyedModelOptions(BaseModel):
    """Options of the ``keyed`` adapter."""

    model_config = ConfigDict(extra="forbid")

    rules: list[KeyedRule] = []
    default: list[ScriptedReply] = [ScriptedReply(text="Done: {prompt}")]


def _turn_prompt_and_step(events: Sequence[Event]) -> tuple[str, int]:
    step = 0
    for index in range(len(events) - 1, -1, -1):
        event = events[index]
        if event.type == "assistant/message":
            step += 1
        elif event.type == "turn/start" and not event.data.get("resumed"):
            for before in range(index - 1, -1, -1):
                if events[before].type == "user/message":
                    return text_of(events[before].data.get("content")), step
            return "", step
    return "", step


def keyed_factory(config: ModelConfig) -> ScriptedAdapter:
    """Adapter factory for ``adapter = "keyed"``."""
    options = KeyedModelOptions.model_validate(config.options)
    if not options.default or any(not rule.replies for rule in options.rules):
        raise ValueError("keyed model: every rule and the default need at least one reply")

    def choose(request: ModelRequest) -> ScriptedReply:
        prompt, step = _turn_prompt_and_step(request.events)
        replies = options.default
        for rule in options.rules:
            if rule.contains in prompt:
                replies = rule.replies
                break
        return replies[min(step, len(replies) - 1)]

    return ScriptedAdapter(choose)


def apply(ctx: Context, config: NoConfig, effects: EffectScope) -> None:
    """Register the ``keyed`` model adapter."""
    effects.add(ctx.llm.register_adapter("keyed", keyed_factory))


plugin = Plugin("dsh-testing-keyed-model", apply, NoConfig)
