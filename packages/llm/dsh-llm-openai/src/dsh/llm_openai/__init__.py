"""dsh.llm_openai — the ``openai`` model adapter: OpenAI-compatible chat completions.

Works with DeepSeek (the default: ``https://api.deepseek.com``, key in
``DEEPSEEK_API_KEY``), OpenAI, vLLM, Ollama and the llama.cpp server. Load the
plugin and name the adapter in a preset::

    [[plugin]]
    name = "dsh-llm-openai"

    [agent.model]
    adapter = "openai"
    model = "deepseek-chat"
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dsh.core import EffectScope, ModelConfig, Plugin
from dsh.llm_openai.adapter import OpenAIChatAdapter, SharedClient
from dsh.llm_openai.config import (
    DEFAULT_BASE_URL,
    DEFAULT_KEY_ENV,
    DEFAULT_MODEL,
    Config,
    OpenAIOptions,
    resolve_options,
)
from dsh.llm_openai.messages import chat_messages, tool_definitions

if TYPE_CHECKING:
    from dsh.core import Context

__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_KEY_ENV",
    "DEFAULT_MODEL",
    "Config",
    "OpenAIChatAdapter",
    "OpenAIOptions",
    "SharedClient",
    "apply",
    "chat_messages",
    "plugin",
    "resolve_options",
    "tool_definitions",
]


def apply(ctx: Context, config: Config, effects: EffectScope) -> None:
    """Register the OpenAI-compatible chat-completions model adapter."""
    clients = SharedClient()
    effects.add(clients.aclose)
    defaults = config.model_dump(exclude={"adapter"}, exclude_unset=True)

    def factory(model: ModelConfig) -> OpenAIChatAdapter:
        options = resolve_options(defaults, model.options)
        return OpenAIChatAdapter(options, model=model.model, client=clients)

    effects.add(ctx.llm.register_adapter(config.adapter, factory))


plugin = Plugin("dsh-llm-openai", apply, Config)
"""The ``dsh-llm-openai`` plugin (entry point in the ``dsh.plugins`` group)."""
