"""The plugin shape shared by the ``spawn`` and ``fork`` distributions."""

from __future__ import annotations

from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from dsh.core import Context, EffectScope, Plugin
from dsh.subagent import SubagentRuntime
from dsh.subagent_in_process_driver._driver import InProcessProvider

__all__ = ["InProcessProviderConfig", "ProviderFactory", "provider_factory", "provider_plugin"]


class InProcessProviderConfig(BaseModel):
    """Config of an in-process provider plugin."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(None, min_length=1)
    """The provider name tools and callers use (default: ``spawn`` / ``fork``)."""


def provider_plugin(
    distribution: str, default_name: str, *, fork: bool
) -> Plugin[InProcessProviderConfig]:
    """A plugin registering an :class:`InProcessProvider` with ``ctx.subagents``."""

    def apply(ctx: Context, config: InProcessProviderConfig, effects: EffectScope) -> None:
        provider = InProcessProvider(config.name or default_name, fork=fork)
        effects.add(SubagentRuntime.of(ctx).register_provider(provider))

    kind = "a child seeded with the parent's completed turns" if fork else "a fresh child"
    return Plugin(
        distribution,
        apply,
        InProcessProviderConfig,
        description=f"Register the in-process subagent provider {default_name!r}: {kind}.",
    )


class ProviderFactory(Protocol):
    """``provider(name=...)``: a provider instance, for registering by hand."""

    def __call__(self, name: str = ...) -> InProcessProvider: ...


def provider_factory(default_name: str, *, fork: bool) -> ProviderFactory:
    """The ``provider(name=default_name)`` function a spawn or fork distribution exports:
    a new :class:`InProcessProvider` (a ``fork`` one when ``fork``) to register by hand."""

    def provider(name: str = default_name) -> InProcessProvider:
        return InProcessProvider(name, fork=fork)

    provider.__doc__ = f"A ``{default_name}`` provider instance (for registering by hand)."
    return provider
