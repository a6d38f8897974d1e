"""The ``dsh-tool-subagent`` plugin: one tool per row, bound to one provider.

The tool is registered while its provider is registered: it appears when the
provider does and goes when the provider goes. Problems the config makes
certain fail the load: a tool name already taken, or a request field the
provider cannot honour (numeric ``max_depth`` without ``depth_limit``, a
``persona`` or ``tool_filter`` it does not support).
"""

from __future__ import annotations

import logging
import weakref

from dsh.core import BusEvent, Context, Disposer, EffectScope, Plugin
from dsh.subagent import (
    EVENT_PROVIDER_ADDED,
    EVENT_PROVIDER_REMOVED,
    SubagentProvider,
    SubagentRuntime,
    supports_continuable,
)
from dsh.tool_subagent.config import SubagentToolConfig
from dsh.tool_subagent.tool import build_tool

__all__ = ["SubagentToolError", "check_compatible", "plugin"]

_log = logging.getLogger("dsh.tool_subagent")

_claims: weakref.WeakKeyDictionary[Context, set[str]] = weakref.WeakKeyDictionary()


class SubagentToolError(ValueError):
    """The tool's config cannot work with its provider, or its name is taken."""


def check_compatible(config: SubagentToolConfig, provider: SubagentProvider) -> None:
    """Raise :class:`SubagentToolError` if ``provider`` cannot honour ``config``."""
    caps = provider.capabilities
    where = f'tool "{config.tool_name}" (provider "{provider.name}")'
    if config.numeric_max_depth is not None and not caps.depth_limit:
        raise SubagentToolError(
            f'{where}: max_depth = {config.max_depth} needs the "depth_limit" capability,'
            f' which provider "{provider.name}" lacks; set max_depth = "provider-managed"'
        )
    if config.tool_filter is not None and not caps.tool_filter:
        raise SubagentToolError(
            f'{where}: tool_filter needs the "tool_filter" capability, which'
            f' provider "{provider.name}" lacks'
        )
    if config.persona is not None and not caps.persona:
        raise SubagentToolError(
            f'{where}: persona needs the "persona" capability, which provider'
            f' "{provider.name}" lacks'
        )
    if (
        config.enable_run_in_background
        and config.background_mode == "continuable"
        and not supports_continuable(provider)
    ):
        raise SubagentToolError(
            f'{where}: background_mode = "continuable" needs a provider with'
            f' prepare_continuable, which provider "{provider.name}" lacks'
        )


def apply(ctx: Context, config: SubagentToolConfig, effects: EffectScope) -> None:
    """Claim the tool name, register the tool while its provider is registered."""
    claimed = _claims.setdefault(ctx, set())
    if config.tool_name in claimed or config.tool_name in ctx.tools:
        raise SubagentToolError(f'a tool named "{config.tool_name}" is already registered')
    claimed.add(config.tool_name)
    effects.add(lambda: claimed.discard(config.tool_name))
    runtime = SubagentRuntime.of(ctx)
    registration: list[Disposer] = []

    def unregister() -> None:
        while registration:
            registration.pop()()

    def register(provider: SubagentProvider) -> None:
        check_compatible(config, provider)
        unregister()
        registration.append(ctx.tools.register(build_tool(runtime, config, provider)))

    provider = runtime.get_provider(config.provider)
    if provider is not None:
        register(provider)  # errors here fail the load

    def on_added(event: BusEvent) -> None:
        if event.data.get("name") != config.provider:
            return
        added = runtime.get_provider(config.provider)
        if added is None:
            return
        try:
            register(added)
        except Exception:
            _log.exception(
                "tool %r not registered for provider %r", config.tool_name, config.provider
            )

    def on_removed(event: BusEvent) -> None:
        if event.data.get("name") == config.provider:
            unregister()

    effects.add(ctx.events.on(EVENT_PROVIDER_ADDED, on_added))
    effects.add(ctx.events.on(EVENT_PROVIDER_REMOVED, on_removed))
    effects.add(unregister)


plugin = Plugin("dsh-tool-subagent", apply, SubagentToolConfig)
