"""Options of the ``openai`` adapter, and the plugin's config.

Options come from ``ModelConfig.options`` (``[agent.model.options]`` in a preset);
the plugin row's config gives defaults for every model that uses the adapter::

    [[plugin]]
    name = "dsh-llm-openai"
    config = { base_url = "http://127.0.0.1:11434/v1", api_key_env = "" }   # Ollama

    [agent.model]
    adapter = "openai"
    model = "qwen3:8b"
    options = { extra_body = { temperature = 0.2 } }
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from dsh.core.plugins import validation_problems
from dsh.core.tracing import redact_urls

__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_KEY_ENV",
    "DEFAULT_MODEL",
    "Config",
    "OpenAIOptions",
    "resolve_options",
]

DEFAULT_BASE_URL = "https://api.deepseek.com"
DEFAULT_KEY_ENV = "DEEPSEEK_API_KEY"
DEFAULT_MODEL = "deepseek-chat"

_RESERVED = frozenset({"model", "messages", "stream", "tools"})


class OpenAIOptions(BaseModel):
    """How to reach an OpenAI-compatible chat-completions endpoint."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str = DEFAULT_BASE_URL
    """The API root; requests go to ``<base_url>/chat/completions``
    (``https://api.openai.com/v1``, ``http://127.0.0.1:8000/v1`` for vLLM, ...)."""
    api_key_env: str = DEFAULT_KEY_ENV
    """Environment variable holding the API key, sent as a bearer token.
    Empty: send no key (local servers)."""
    model: str = DEFAULT_MODEL
    """The model when ``ModelConfig.model`` is empty."""
    connect_timeout: float = Field(10.0, gt=0)
    """Seconds to establish a connection."""
    read_timeout: float = Field(120.0, gt=0)
    """Longest silence, in seconds, while waiting for the response or its next bytes."""
    write_timeout: float = Field(30.0, gt=0)
    """Seconds to send the request."""
    include_usage: bool = True
    """Ask for token usage in the stream (``stream_options.include_usage``); turn off for
    servers that reject ``stream_options``."""
    extra_body: dict[str, Any] = {}
    """More request fields: ``temperature``, ``max_tokens``, ``tool_choice``, ... (not
    ``model``, ``messages``, ``stream`` or ``tools``, which the adapter sets)."""
    headers: dict[str, str] = {}
    """More HTTP headers (e.g. ``OpenAI-Organization``)."""
    pricing: str = "auto"
    """How calls are priced (``cost_usd`` of their usage, from the ``genai-prices``
    table): ``auto`` finds the provider from ``base_url``, else from the model name;
    a provider id (``openai``, ``deepseek``, ...) names it; ``none`` prices nothing."""

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {_shown(value)!r}")
        return value.rstrip("/")

    @field_validator("extra_body")
    @classmethod
    def _no_reserved_fields(cls, value: dict[str, Any]) -> dict[str, Any]:
        clash = sorted(_RESERVED & value.keys())
        if clash:
            raise ValueError(f"extra_body may not set {', '.join(clash)} (the adapter sets them)")
        return value

    @property
    def url(self) -> str:
        """The chat-completions endpoint."""
        return f"{self.base_url}/chat/completions"


class Config(OpenAIOptions):
    """Config of the ``dsh-llm-openai`` plugin: the adapter name to register, and
    defaults for the options of every model that uses it."""

    adapter: str = "openai"
    """Register under this name (two rows with different names may point at two servers)."""


def resolve_options(defaults: Mapping[str, Any], options: Mapping[str, Any]) -> OpenAIOptions:
    """``options`` over ``defaults`` (``extra_body`` and ``headers`` merge key by key).

    Raises ``ValueError`` naming the invalid fields.
    """
    merged = {**defaults, **options}
    for key in ("extra_body", "headers"):
        if key in defaults and key in options and isinstance(options[key], Mapping):
            merged[key] = {**defaults[key], **options[key]}
    try:
        return OpenAIOptions.model_validate(merged)
    except ValidationError as exc:
        raise ValueError(f"invalid openai model options: {validation_problems(exc)}") from None


def _shown(url: str) -> str:
    """``url`` without its credentials, for a message (a URL whose scheme is missing,
    ``user:pass@host/v1``, included)."""
    if "://" not in url:
        authority = url.split("/", 1)[0]
        if "@" in authority:
            url = "***" + url[authority.rindex("@") :]
    return redact_urls(url)
