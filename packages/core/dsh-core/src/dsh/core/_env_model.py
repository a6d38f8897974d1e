"""The model the environment names, for a preset that configures none.

One rule, the same for ``dsh run``, ``dsh acp``, ``dsh a2a``, ``dsh worker`` and
:meth:`Context.open <dsh.core.Context.open>` in Python: when the preset has no
``[agent.model]``, the first of these that is set picks the model (the ``openai``
adapter of the dsh-llm-openai plugin in every case, which the standard preset loads):

1. ``OPENAI_BASE_URL`` — an OpenAI-compatible server you point at (vLLM, Ollama,
   llama.cpp, a proxy, OpenAI itself): the key from ``OPENAI_API_KEY`` if set (else
   none is sent), the model from ``OPENAI_MODEL`` (default ``gpt-4o-mini``);
2. ``DEEPSEEK_API_KEY`` — DeepSeek at ``https://api.deepseek.com``, the model from
   ``DEEPSEEK_MODEL`` (default ``deepseek-chat``);
3. ``OPENAI_API_KEY`` — OpenAI at ``https://api.openai.com/v1``, the model from
   ``OPENAI_MODEL`` (default ``gpt-4o-mini``).

A preset's own ``[agent.model]`` always wins; the environment is not consulted then.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dsh.core._errors import ConfigError
from dsh.core._llm import ModelConfig
from dsh.core._redact import redact_urls

if TYPE_CHECKING:
    from dsh.core._presets import Preset

__all__ = ["NO_MODEL_HELP", "EnvModel", "NoModelError", "model_from_env", "require_model"]

DEFAULT_OPENAI_MODEL = "gpt-4o-mini"
DEFAULT_DEEPSEEK_MODEL = "deepseek-chat"
OPENAI_URL = "https://api.openai.com/v1"
DEEPSEEK_URL = "https://api.deepseek.com"

OPENAI_ADAPTER_PLUGIN = "dsh-llm-openai"
"""The plugin that registers the ``openai`` adapter (core cannot import it)."""

NO_MODEL_HELP = (
    "no model is configured: the preset has no [agent.model] and the environment names"
    " none. Set one of these (the first one set wins):\n"
    "\n"
    "  OPENAI_BASE_URL   an OpenAI-compatible server (vLLM, Ollama, llama.cpp, ...), with\n"
    "                    OPENAI_API_KEY if it needs a key, OPENAI_MODEL for the model\n"
    "  DEEPSEEK_API_KEY  DeepSeek (deepseek-chat; DEEPSEEK_MODEL to change)\n"
    "  OPENAI_API_KEY    OpenAI (gpt-4o-mini; OPENAI_MODEL to change)\n"
    "\n"
    "or add one to your preset, for example:\n"
    "\n"
    "  [agent.model]\n"
    '  adapter = "openai"            # needs the dsh-llm-openai plugin row\n'
    '  model = "deepseek-chat"\n'
    '  options = { base_url = "https://api.deepseek.com", api_key_env = "DEEPSEEK_API_KEY" }\n'
    "\n"
    'or use adapter = "scripted" for an offline scripted model.'
)


class NoModelError(ConfigError):
    """An agent needs a model and none is configured: the preset has no
    ``[agent.model]`` and :func:`model_from_env` finds none. The message says what to
    set."""


@dataclass(frozen=True, slots=True)
class EnvModel:
    """The model picked from the environment (``config``), and why (``reason``, e.g.
    ``"DEEPSEEK_API_KEY is set"``)."""

    config: ModelConfig
    reason: str

    def describe(self) -> str:
        """``model deepseek-chat at https://api.deepseek.com (DEEPSEEK_API_KEY is set)``
        (credentials in the URL hidden)."""
        base_url = redact_urls(str(self.config.options.get("base_url", "")))
        return f"model {self.config.model} at {base_url} ({self.reason})"


def _set(env: Mapping[str, str], name: str) -> str:
    return env.get(name, "").strip()


def model_from_env(environ: Mapping[str, str] | None = None) -> EnvModel | None:
    """The model ``environ`` (default: ``os.environ``) names, by the rule of this
    module (``OPENAI_BASE_URL``, else ``DEEPSEEK_API_KEY``, else ``OPENAI_API_KEY``), or
    None. Its adapter is ``openai``: the preset must load the dsh-llm-openai plugin
    (the standard preset does)."""
    env = os.environ if environ is None else environ
    base_url = _set(env, "OPENAI_BASE_URL")
    if base_url:
        return EnvModel(
            ModelConfig(
                adapter="openai",
                model=_set(env, "OPENAI_MODEL") or DEFAULT_OPENAI_MODEL,
                options={
                    "base_url": base_url,
                    "api_key_env": "OPENAI_API_KEY" if _set(env, "OPENAI_API_KEY") else "",
                },
            ),
            "OPENAI_BASE_URL is set",
        )
    if _set(env, "DEEPSEEK_API_KEY"):
        return EnvModel(
            ModelConfig(
                adapter="openai",
                model=_set(env, "DEEPSEEK_MODEL") or DEFAULT_DEEPSEEK_MODEL,
                options={"base_url": DEEPSEEK_URL, "api_key_env": "DEEPSEEK_API_KEY"},
            ),
            "DEEPSEEK_API_KEY is set",
        )
    if _set(env, "OPENAI_API_KEY"):
        return EnvModel(
            ModelConfig(
                adapter="openai",
                model=_set(env, "OPENAI_MODEL") or DEFAULT_OPENAI_MODEL,
                options={"base_url": OPENAI_URL, "api_key_env": "OPENAI_API_KEY"},
            ),
            "OPENAI_API_KEY is set",
        )
    return None


def require_model(preset: Preset, environ: Mapping[str, str] | None = None) -> None:
    """The rule of ``dsh run`` for a command that serves ``preset`` (``dsh a2a``,
    ``dsh mcp``): :class:`NoModelError` naming the preset and what to set when it has no
    ``[agent.model]`` and :func:`model_from_env` finds none in ``environ``."""
    if preset.agent.model is None and model_from_env(environ) is None:
        raise NoModelError(
            f"no model is configured in {preset.source}; add an [agent.model] table to the"
            " preset, or set OPENAI_BASE_URL, DEEPSEEK_API_KEY or OPENAI_API_KEY"
        )
