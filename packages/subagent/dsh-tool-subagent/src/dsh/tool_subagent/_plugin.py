"""The ``dsh-tool-subagent`` plugin: one tool per row, bound to one provider.

The tool is registered while its provider is registered: it appears when the
provider does and goes when the provider goes. Once every row of the preset is
loaded, the row checks its provider (whatever the order of the rows): a missing
provider, or one that cannot honour the row's settings (a numeric ``max_depth``
without ``depth_limit``, a ``persona``, ``tool_filter`` or ``budget`` it does not
support, a continuable background mode without ``prepare_continuable``), fails the load with
a message naming the row, the provider and the fix. A tool name already taken
fails the row at once.
"""

from __future__ import annotations

import weakref

from dsh.core import BusEvent, Context, DshError, EffectScope, Plugin
from dsh.core.lifecycle import Disposer
from dsh.subagent import (
    SubagentProvider,
    SubagentRuntime,
    installed_providers,
    supports_continuable,
)
from dsh.tool_subagent._build import build_tool
from dsh.tool_subagent._config import SubagentToolConfig

__all__ = ["SubagentToolError", "check_compatible", "plugin"]

_claims: weakref.WeakKeyDictionary[Context, set[str]] = weakref.WeakKeyDictionary()


class SubagentToolError(DshError, ValueError):
    """The tool's config cannot work with its provider, or its name is taken."""


def check_compatible(config: SubagentToolConfig, provider: SubagentProvider) -> None:
    """Raise :class:`SubagentToolError` if ``provider`` cannot honour ``config``."""
    caps = provider.capabilities
    where = f'tool "{config.tool_name}" (provider "{provider.name}")'
    if config.numeric_max_depth is not None and not caps.depth_limit:
        raise SubagentToolError(
            f'{where}: max_depth = {config.max_depth} needs the "depth_limit" capability,'
            f' which provider "{provider.name}" lacks; set max_depth = "provider-managed"'
            " (the provider then manages depth itself)"
        )
    if config.tool_filter is not None and not caps.tool_filter:
        raise SubagentToolError(
            f'{where}: tool_filter needs the "tool_filter" capability, which provider'
            f' "{provider.name}" lacks; remove tool_filter from this row or use a provider'
            " that has it (spawn, fork)"
        )
    if config.persona is not None and not caps.persona:
        raise SubagentToolError(
            f'{where}: persona needs the "persona" capability, which provider'
            f' "{provider.name}" lacks; remove persona from this row or use a provider that'
            " has it (spawn, fork)"
        )
    if config.output_schema is not None and not caps.output_schema:
        raise SubagentToolError(
            f'{where}: output_schema needs the "output_schema" capability, which provider'
            f' "{provider.name}" lacks; remove output_schema from this row or use a provider'
            " that has it (spawn, fork)"
        )
    if config.budget is not None and not caps.budget:
        raise SubagentToolError(
            f'{where}: budget needs the "budget" capability, which provider'
            f' "{provider.name}" lacks (budgets are enforced in-process only so far);'
            " remove budget from this row or use a provider that has it (spawn, fork)"
        )
    continuable = config.enable_run_in_background and config.background_mode == "continuable"
    if continuable and config.budget is not None:
        raise SubagentToolError(
            f"{where}: budget does not apply to continuable children yet; use"
            ' background_mode = "one-shot" or remove budget from this row'
        )
    if (
        config.enable_run_in_background
        and config.background_mode == "continuable"
        and not supports_continuable(provider)
    ):
        raise SubagentToolError(
            f'{where}: background_mode = "continuable" needs a provider with'
            f' prepare_continuable, which provider "{provider.name}" lacks; use'
            ' background_mode = "one-shot" or a provider that has it (spawn, fork)'
        )


def _missing_provider(runtime: SubagentRuntime, config: SubagentToolConfig) -> str:
    registered = runtime.list()
    where = f'tool "{config.tool_name}": no subagent provider named "{config.provider}" is'
    names = ", ".join(f'"{name}"' for name in registered) or "none"
    installed = installed_providers()
    row = next((p.plugin for p in installed if p.name == config.provider and p.plugin), None)
    if row is not None:  # installed, its plugin not loaded
        fix = f'provider "{config.provider}" is installed: add a [[plugin]] row with name = "{row}"'
    else:
        others = [p.describe() for p in installed if p.name not in registered]
        fix = (
            "add a [[plugin]] row for the provider's plugin (installed providers not loaded:"
            f" {', '.join(others) or 'none'})"
        )
    return f"{where} registered (registered: {names}); {fix}, or set provider to a registered name"


def apply(ctx: Context, config: SubagentToolConfig, effects: EffectScope) -> None:
    """Claim the tool name, register the tool while its provider is registered, and
    check the provider once the preset has loaded."""
    claimed = _claims.setdefault(ctx, set())
    if config.tool_name in claimed or config.tool_name in ctx.tools:
        raise SubagentToolError(f'a tool named "{config.tool_name}" is already registered')
    claimed.add(config.tool_name)
    effects.add(lambda: claimed.discard(config.tool_name))
    runtime = SubagentRuntime.of(ctx)
    registration: list[Disposer] = []
    problem: list[SubagentToolError] = []

    def unregister() -> None:
        while registration:
            registration.pop()()

    def register(provider: SubagentProvider) -> None:
        check_compatible(config, provider)
        unregister()
        registration.append(ctx.tools.register(build_tool(runtime, config, provider)))

    def on_added(event: BusEvent) -> None:
        if event.data.get("name") != config.provider:
            return
        added = runtime.get_provider(config.provider)
        if added is None:
            return
        problem.clear()
        try:
            register(added)
        except SubagentToolError as exc:
            problem.append(exc)  # reported by the after-load check

    def on_removed(event: BusEvent) -> None:
        if event.data.get("name") == config.provider:
            unregister()

    def check() -> None:
        if problem:
            raise problem[0]
        provider = runtime.get_provider(config.provider)
        if provider is None:
            raise SubagentToolError(_missing_provider(runtime, config))
        if not registration:
            register(provider)

    provider = runtime.get_provider(config.provider)
    if provider is not None:
        register(provider)  # errors here fail the load
    effects.add(ctx.events.on("subagent/provider-added", on_added))
    effects.add(ctx.events.on("subagent/provider-removed", on_removed))
    effects.add(unregister)
    effects.after_load(check)


plugin = Plugin("dsh-tool-subagent", apply, SubagentToolConfig)
