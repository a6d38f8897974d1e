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

from dsh.llm_openai._adapter import OpenAIChatAdapter, SharedClient
from dsh.llm_openai._config import (
    DEFAULT_BASE_URL,
    DEFAULT_KEY_ENV,
    DEFAULT_MODEL,
    Config,
    OpenAIOptions,
    resolve_options,
)
from dsh.llm_openai._messages import chat_messages, tool_definitions
from dsh.llm_openai._plugin import apply, plugin

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
