"""The LLM runtime: model requests, streamed responses, and the adapter registry.

An adapter turns a :class:`ModelRequest` (system prompt, the session's events,
tool specs) into a stream of :class:`TextDelta`, :class:`ToolCall` and one final
:class:`ModelDone`. Adapters register a factory by name; an agent's model is a
:class:`ModelConfig` naming the adapter.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, Protocol

from pydantic import BaseModel, ConfigDict

from dsh.core._effects import Disposer
from dsh.core._errors import ConfigError, DshError
from dsh.core._session import Event
from dsh.core._signals import AbortSignal

__all__ = [
    "BoundModel",
    "LLMRuntime",
    "ModelAdapter",
    "ModelConfig",
    "ModelConfigError",
    "ModelDone",
    "ModelError",
    "ModelRequest",
    "ModelStopReason",
    "ModelStreamEvent",
    "TextDelta",
    "ToolCall",
    "ToolSpec",
    "Usage",
]

ModelStopReason = Literal["end", "tool_calls", "max-tokens", "refusal"]


class ModelError(DshError):
    """The model call failed. ``status`` is the HTTP status where there was one."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What the model sees of a tool: name, description, JSON Schema of its input."""

    name: str
    description: str
    parameters: Mapping[str, Any]


@dataclass(slots=True)
class Usage:
    """Token counts of one model call (or a sum of calls), and its price where the
    adapter knows it."""

    input_tokens: int = 0
    """Every input token, cached ones included."""
    output_tokens: int = 0
    cached_input_tokens: int | None = None
    """The part of ``input_tokens`` read from the provider's prompt cache, if reported."""
    cost_usd: float | None = None
    """What the call cost in US dollars; None when no price is known."""

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            _plus(self.cached_input_tokens, other.cached_input_tokens),
            _plus(self.cost_usd, other.cost_usd),
        )

    def to_json(self) -> dict[str, Any]:
        """The JSON form stored in events and results (the optional fields when set)."""
        out: dict[str, Any] = {"input_tokens": self.input_tokens}
        out["output_tokens"] = self.output_tokens
        if (cached := self.cached_input_tokens) is not None:
            out["cached_input_tokens"] = cached
        if (cost := self.cost_usd) is not None:
            out["cost_usd"] = cost
        return out


def _plus(a: Any, b: Any) -> Any:
    return a if b is None else b if a is None else a + b


@dataclass(slots=True)
class ModelRequest:
    """One call to a model.

    ``events`` is the session log the agent has so far (read-only; adapters pick
    the message events they understand and ignore the rest).
    """

    model: str
    system: str
    events: Sequence[Event]
    tools: Sequence[ToolSpec]
    options: Mapping[str, Any] = field(default_factory=dict)


class TextDelta(NamedTuple):
    """A piece of assistant text."""

    text: str


class ToolCall(NamedTuple):
    """A complete tool call requested by the model."""

    id: str
    name: str
    arguments: Mapping[str, Any]


class ModelDone(NamedTuple):
    """The end of one model response."""

    stop_reason: ModelStopReason = "end"
    usage: Usage | None = None


ModelStreamEvent = TextDelta | ToolCall | ModelDone


class ModelAdapter(Protocol):
    """Streams one model response for a request."""

    def stream(self, request: ModelRequest, signal: AbortSignal) -> AsyncIterator[ModelStreamEvent]:
        """Yield deltas and tool calls, then exactly one :class:`ModelDone`.

        Raise :class:`ModelError` for a failed call.
        """
        ...


class ModelConfigError(ConfigError, ValueError):
    """A model configuration names an adapter that is not registered, or options its
    adapter rejects."""


class ModelConfig(BaseModel):
    """Which adapter and model an agent uses, with adapter options."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    adapter: str
    model: str = ""
    options: dict[str, Any] = {}


AdapterFactory = Callable[[ModelConfig], ModelAdapter]


@dataclass(frozen=True, slots=True)
class BoundModel:
    """An adapter instance together with the model name it is asked for."""

    adapter: ModelAdapter
    model: str = ""
    options: Mapping[str, Any] = field(default_factory=dict)


class LLMRuntime:
    """Adapter registry (``ctx.llm``)."""

    def __init__(self) -> None:
        self._factories: dict[str, AdapterFactory] = {}

    def register_adapter(self, name: str, factory: AdapterFactory) -> Disposer:
        """Register an adapter factory under ``name``; a clash raises ``ValueError``."""
        if name in self._factories:
            raise ValueError(f'an LLM adapter named "{name}" is already registered')
        self._factories[name] = factory

        def remove() -> None:
            if self._factories.get(name) is factory:
                del self._factories[name]

        return remove

    def adapters(self) -> list[str]:
        """Names of the registered adapters."""
        return list(self._factories)

    def bind(self, config: ModelConfig) -> BoundModel:
        """Instantiate the adapter for ``config``.

        Raises :class:`ModelConfigError` (a ``ConfigError`` and a ``ValueError``) naming
        the adapter and the registered ones when it is unknown, or what the adapter
        rejected in the options.
        """
        factory = self._factories.get(config.adapter)
        if factory is None:
            known = ", ".join(sorted(self._factories)) or "none"
            fix = "load the plugin that provides it"
            if config.adapter == "openai":  # the one a model from the environment names
                fix = (
                    'the "openai" adapter comes with the dsh-llm-openai plugin: add a'
                    ' [[plugin]] row with name = "dsh-llm-openai" to the preset, or'
                    ' extends = "standard"'
                )
            raise ModelConfigError(
                f'no LLM adapter named "{config.adapter}" (registered: {known}); {fix}'
            )
        try:
            adapter = factory(config)
        except ModelConfigError:
            raise
        except (ValueError, TypeError) as exc:
            raise ModelConfigError(f'LLM adapter "{config.adapter}": {exc}') from exc
        return BoundModel(adapter, config.model, config.options)
