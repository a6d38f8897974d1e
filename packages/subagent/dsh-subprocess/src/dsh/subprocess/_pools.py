"""A provider's pools, one per context (:class:`PoolsByContext`), and the base of a
provider that keeps them (:class:`PooledProvider`)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

from dsh.core import Context, EffectScope
from dsh.subagent import SubagentCapabilities, SubagentRun, SubagentRuntime, SubagentStartRequest
from dsh.subprocess._config import SubprocessConfig
from dsh.subprocess._pool import ProcessPool
from dsh.subprocess._pooled import PoolConfig, PooledProcess, Starting
from dsh.subprocess._run import provider_sandbox
from dsh.subprocess._sandbox import Sandbox

__all__ = ["PooledProvider", "PoolsByContext"]

P = TypeVar("P", bound=PooledProcess)


class PoolsByContext(Generic[P]):
    """A provider's pools, one per context: made on first use by ``factory(ctx)``
    (opened, so it warms up at once), closed when the context closes
    (``ctx.on_close``) or when the provider goes (:meth:`aclose`)."""

    def __init__(self, factory: Callable[[Context], ProcessPool[P]]) -> None:
        self._factory = factory
        self._pools: dict[Context, tuple[ProcessPool[P], Callable[[], None]]] = {}

    def get(self, ctx: Context) -> ProcessPool[P] | None:
        """The context's pool (made now if need be); None once the context is closing."""
        entry = self._pools.get(ctx)
        if entry is not None and not entry[0].closed:
            return entry[0]
        if ctx.closing:
            return None
        pool = self._factory(ctx)
        self._pools[ctx] = (pool, ctx.on_close(lambda: self._close(ctx, pool)))
        pool.open()
        return pool

    async def _close(self, ctx: Context, pool: ProcessPool[P]) -> None:
        entry = self._pools.get(ctx)
        if entry is not None and entry[0] is pool:
            del self._pools[ctx]
        await pool.aclose()

    async def aclose(self) -> None:
        """Close every pool (processes that runs hold close when released)."""
        entries, self._pools = list(self._pools.values()), {}
        for pool, remove_hook in entries:
            remove_hook()
            await pool.aclose()


class PooledProvider(Generic[P]):
    """Base of a provider whose children are local processes it may keep warm (acp,
    codex): per context, a :class:`ProcessPool` of processes started by
    :meth:`start_pooled` with the row's environment (:meth:`pool_env`), working
    directory, sandbox and graces; :meth:`register` is its plugin's step.

    A subclass sets ``name``, ``capabilities`` and ``inherits_parent_context``, defines
    ``start``, :meth:`pool_env` and :meth:`start_pooled`, and calls
    ``super().__init__(config, config.pool)`` (with ``concurrency``: runs one process
    serves at once)."""

    name: str
    capabilities: SubagentCapabilities
    inherits_parent_context: bool

    def __init__(self, config: SubprocessConfig, pool: PoolConfig, concurrency: int = 1) -> None:
        self.config = config
        """The provider row's config (a subclass annotates its own type)."""
        self._pool_config = pool
        self._concurrency = concurrency
        self._pools: PoolsByContext[P] | None = (
            PoolsByContext(self._make_pool) if pool.enabled else None
        )

    async def start(self, request: SubagentStartRequest) -> SubagentRun:
        """Start a child for ``request`` (the subclass's)."""
        raise NotImplementedError

    def pool_env(self, ctx: Context) -> dict[str, str]:
        """The environment of a pooled process (no run's depth variables: a pooled
        process serves runs of any depth)."""
        raise NotImplementedError

    async def start_pooled(
        self, starting: Starting, *, env: Mapping[str, str], cwd: str, sandbox: Sandbox | None
    ) -> P:
        """Start one process for the pool and finish its handshake."""
        raise NotImplementedError

    def pool(self, ctx: Context) -> ProcessPool[P] | None:
        """The context's warm pool (started on first use); None when pooling is off or
        the context is closing."""
        return self._pools.get(ctx) if self._pools is not None else None

    async def aclose(self) -> None:
        """Close the warm pools (processes a run holds close when it is done)."""
        if self._pools is not None:
            await self._pools.aclose()

    def register(self, ctx: Context, effects: EffectScope) -> None:
        """The plugin's step: refuse a row ``sandbox`` wider than the preset's
        ``[sandbox]`` (the load fails), register this provider under its name, close
        its pools when the row is unloaded, and warm the context's pool now (it closes
        with the context)."""
        what = f'the "{self.name}" provider'
        self.config.sandbox_policy(ctx.sandbox, strict=True, what=what)
        effects.add(SubagentRuntime.of(ctx).register_provider(self))
        effects.add(self.aclose)
        self.pool(ctx)

    def _make_pool(self, ctx: Context) -> ProcessPool[P]:
        config = self.config
        env = self.pool_env(ctx)
        cwd = config.cwd or ctx.cwd
        sandbox = provider_sandbox(config, ctx.sandbox, env)
        start = functools.partial(self.start_pooled, env=env, cwd=cwd, sandbox=sandbox)
        return ProcessPool(
            start,
            self._pool_config,
            name=self.name,
            env=env,
            cwd=cwd,
            sandbox=sandbox,
            concurrency=self._concurrency,
            start_timeout=config.start_timeout,
            eof_grace=config.eof_grace,
            term_grace=config.term_grace,
        )
