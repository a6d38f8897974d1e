"""A provider's pools, one per context (:class:`PoolsByContext`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from dsh.core import Context
from dsh.subprocess._pool import ProcessPool
from dsh.subprocess._pooled import PooledProcess

__all__ = ["PoolsByContext"]

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
