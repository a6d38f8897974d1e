"""The ``dsh-llm-openai`` plugin: registers the ``openai`` model adapter."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dsh.core import EffectScope, Plugin
from dsh.core.models import ModelConfig
from dsh.llm_openai._adapter import OpenAIChatAdapter, SharedClient
from dsh.llm_openai._config import Config, resolve_options

if TYPE_CHECKING:
    from dsh.core import Context

__all__ = ["apply", "plugin"]


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
