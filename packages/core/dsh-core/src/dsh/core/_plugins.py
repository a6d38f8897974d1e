"""Plugins: packages found through the ``dsh.plugins`` entry-point group.

A plugin has a pydantic ``Config`` model and an ``apply(ctx, config, effects)``
function. Everything it registers goes into ``effects`` (an
:class:`~dsh.core._effects.EffectScope`), so unloading it removes it all::

    class Config(BaseModel):
        greeting: str = "hi"

    def apply(ctx: Context, config: Config, effects: EffectScope) -> None:
        effects.add(ctx.tools.register(make_tool(config.greeting)))

    plugin = Plugin("dsh-example", apply, Config)

and in the distribution's ``pyproject.toml``::

    [project.entry-points."dsh.plugins"]
    dsh-example = "dsh.example:plugin"
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from dsh.core._effects import Disposer, EffectScope
from dsh.core._presets import PluginRow, PresetError
from dsh.core._suggest import did_you_mean
from dsh.core._validation import validation_problems

__all__ = ["ENTRY_POINT_GROUP", "LoadedPlugin", "NoConfig", "Plugin", "PluginError", "PluginHost"]

ENTRY_POINT_GROUP = "dsh.plugins"

C = TypeVar("C", bound=BaseModel)


class PluginError(PresetError):
    """A plugin could not be found, configured or applied."""


class NoConfig(BaseModel):
    """Config model of plugins that take none."""

    model_config = ConfigDict(extra="forbid")


ApplyFunction = Callable[[Any, C, EffectScope], Awaitable[None] | None]
"""``apply(ctx, config, effects)``: ``ctx`` is the :class:`~dsh.core.Context` the plugin
is loaded into (``Any`` here: plugins sit below the context, which loads them)."""


class Plugin(Generic[C]):
    """A loadable unit: a name, a config model and an apply function."""

    def __init__(
        self,
        name: str,
        apply: ApplyFunction[C],
        config: type[C] = NoConfig,  # type: ignore[assignment]
        *,
        description: str = "",
    ) -> None:
        self.name = name
        self.apply = apply
        self.config = config
        self.description = description or (inspect.getdoc(apply) or "").split("\n")[0]

    def parse_config(self, raw: Mapping[str, Any] | BaseModel | None) -> C:
        """Validate ``raw`` against this plugin's config model."""
        if isinstance(raw, self.config):
            return raw
        if isinstance(raw, BaseModel):
            raw = raw.model_dump()
        return self.config.model_validate(raw or {})

    def __repr__(self) -> str:
        return f"<Plugin {self.name}>"


@dataclass(slots=True)
class LoadedPlugin:
    """A plugin applied to a context, with the scope holding its effects."""

    id: str
    plugin: Plugin[Any]
    config: BaseModel
    effects: EffectScope


class PluginHost:
    """Loads and unloads plugins for one context (``ctx.plugins``)."""

    def __init__(self, ctx: object) -> None:
        self._ctx = ctx
        """The context handed to every plugin's ``apply``."""
        self._loaded: dict[str, LoadedPlugin] = {}
        self._local: dict[str, Plugin[Any]] = {}
        self._entry_points: dict[str, EntryPoint] | None = None

    # -- discovery ----------------------------------------------------------------

    def available(self) -> list[str]:
        """Names of every plugin that can be loaded (entry points and local ones)."""
        return sorted({*self._discover(), *self._local})

    def add(self, plugin: Plugin[Any]) -> Disposer:
        """Make ``plugin`` loadable by name without an entry point (tests, scripts)."""
        self._local[plugin.name] = plugin

        def remove() -> None:
            if self._local.get(plugin.name) is plugin:
                del self._local[plugin.name]

        return remove

    def resolve(self, name: str) -> Plugin[Any]:
        """The plugin called ``name``; unknown names raise listing what is installed."""
        local = self._local.get(name)
        if local is not None:
            return local
        entry = self._discover().get(name)
        if entry is None:
            available = self.available()
            hint = did_you_mean(name, available)
            raise PluginError(
                f'unknown plugin "{name}"'
                + (f"; {hint}" if hint else "")
                + f" (installed: {', '.join(available) or 'none'})"
            )
        try:
            plugin = entry.load()
        except Exception as exc:
            raise PluginError(
                f'plugin "{name}" failed to import from {entry.value}: {type(exc).__name__}: {exc}'
            ) from exc
        if not isinstance(plugin, Plugin):
            raise PluginError(f'entry point "{name}" ({entry.value}) is not a dsh Plugin')
        return plugin

    def _discover(self) -> dict[str, EntryPoint]:
        if self._entry_points is None:
            self._entry_points = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
        return self._entry_points

    # -- loading ------------------------------------------------------------------

    def loaded(self) -> list[LoadedPlugin]:
        """Loaded plugins in load order."""
        return list(self._loaded.values())

    def get(self, plugin_id: str) -> LoadedPlugin | None:
        """The loaded plugin with ``plugin_id``."""
        return self._loaded.get(plugin_id)

    async def load(
        self,
        name: str,
        config: Mapping[str, Any] | BaseModel | None = None,
        *,
        id: str | None = None,
    ) -> LoadedPlugin:
        """Load one plugin. Errors name the plugin; nothing stays registered on failure."""
        row = PluginRow(id=id or name, name=name, config={})
        loaded = await self._load(row, config, row.describe())
        try:
            self._check(loaded, row.describe())
        except BaseException:
            await self.unload(loaded.id)
            raise
        return loaded

    async def load_rows(self, rows: Sequence[tuple[int, PluginRow]]) -> list[LoadedPlugin]:
        """Load preset rows in order, all or nothing: a bad row unloads the earlier ones."""
        done: list[LoadedPlugin] = []
        labels: list[str] = []
        try:
            for index, row in rows:
                label = row.describe(index)
                done.append(await self._load(row, row.config, label))
                labels.append(label)
            for loaded, label in zip(done, labels, strict=True):
                self._check(loaded, label)
        except BaseException:
            for loaded in reversed(done):
                await self.unload(loaded.id)
            raise
        return done

    def _check(self, loaded: LoadedPlugin, label: str) -> None:
        """Run the row's after-load checks; a failure names the row."""
        try:
            loaded.effects.run_checks()
        except PluginError as exc:
            raise PluginError(f"{label}: {exc}") from exc
        except Exception as exc:
            raise PluginError(f"{label}: {exc}") from exc

    async def _load(
        self, row: PluginRow, config: Mapping[str, Any] | BaseModel | None, label: str
    ) -> LoadedPlugin:
        if row.id in self._loaded:
            raise PluginError(f'{label}: a plugin with id "{row.id}" is already loaded')
        try:
            plugin = self.resolve(row.name)
        except PluginError as exc:
            raise PluginError(f"{label}: {exc}") from exc
        try:
            parsed = plugin.parse_config(config)
        except ValidationError as exc:
            problems = validation_problems(exc, plugin.config)
            raise PluginError(f"{label}: invalid config: {problems}") from None
        effects = EffectScope(row.id)
        try:
            outcome = plugin.apply(self._ctx, parsed, effects)
            if inspect.isawaitable(outcome):
                await outcome
        except Exception as exc:
            await _close_quietly(effects)
            raise PluginError(f"{label}: {exc}") from exc
        except BaseException:
            await _close_quietly(effects)
            raise
        loaded = LoadedPlugin(row.id, plugin, parsed, effects)
        self._loaded[row.id] = loaded
        return loaded

    async def unload(self, plugin_id: str) -> None:
        """Unload a plugin, undoing everything it registered."""
        loaded = self._loaded.pop(plugin_id, None)
        if loaded is None:
            raise PluginError(f'no loaded plugin with id "{plugin_id}"')
        await loaded.effects.aclose()

    async def unload_all(self) -> None:
        """Unload every plugin, newest first."""
        for plugin_id in reversed(list(self._loaded)):
            await self.unload(plugin_id)


async def _close_quietly(effects: EffectScope) -> None:
    """Undo a half-applied plugin; its own failure must not mask the original error."""
    with contextlib.suppress(Exception):  # already logged by EffectScope
        await effects.aclose()
