"""A model from the environment, for presets that configure none.

When the preset has no ``[agent.model]``, ``dsh run`` takes the first of these that
is set (the ``openai`` adapter of dsh-llm-openai in every case):

1. ``OPENAI_BASE_URL`` — an OpenAI-compatible server you point at (vLLM, Ollama,
   llama.cpp, a proxy, OpenAI itself): the key from ``OPENAI_API_KEY`` if set (else
   none is sent), the model from ``OPENAI_MODEL`` (default ``gpt-4o-mini``);
2. ``DEEPSEEK_API_KEY`` — DeepSeek at ``https://api.deepseek.com``, the model from
   ``DEEPSEEK_MODEL`` (default ``deepseek-chat``);
3. ``OPENAI_API_KEY`` — OpenAI at ``https://api.openai.com/v1``, the model from
   ``OPENAI_MODEL`` (default ``gpt-4o-mini``).

A preset's own ``[agent.model]`` always wins; the environment is never consulted then.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from dsh.core import ModelConfig, Preset

__all__ = ["EnvModel", "model_from_env", "with_env_model"]

DEFAULT_OPENAI_MODEL = "gpt-4o-mini"
DEFAULT_DEEPSEEK_MODEL = "deepseek-chat"
OPENAI_URL = "https://api.openai.com/v1"
DEEPSEEK_URL = "https://api.deepseek.com"


@dataclass(frozen=True, slots=True)
class EnvModel:
    """The model picked from the environment, and why (for the user)."""

    config: ModelConfig
    reason: str

    def describe(self) -> str:
        """``model deepseek-chat at https://api.deepseek.com (DEEPSEEK_API_KEY is set)``."""
        base_url = self.config.options.get("base_url", "")
        return f"model {self.config.model} at {base_url} ({self.reason})"


def _set(env: Mapping[str, str], name: str) -> str:
    return env.get(name, "").strip()


def model_from_env(env: Mapping[str, str]) -> EnvModel | None:
    """The model the environment names (see the module's order), or None."""
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


def with_env_model(preset: Preset, env: Mapping[str, str]) -> tuple[Preset, EnvModel | None]:
    """``preset`` with the environment's model as ``[agent.model]`` when it has none."""
    if preset.agent.model is not None:
        return preset, None
    found = model_from_env(env)
    if found is None:
        return preset, None
    agent = preset.agent.model_copy(update={"model": found.config})
    return preset.model_copy(update={"agent": agent}), found
