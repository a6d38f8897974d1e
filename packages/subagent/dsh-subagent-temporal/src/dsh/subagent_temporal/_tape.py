"""Each delegation's own tape on a worker (``dsh worker --tapes DIR``): attempt 2 of a
child resumes from what attempt 1 recorded instead of repeating it.

Every attempt of run ``R`` opens ``DIR/<R>/`` with a dsh-tape proxy in ``resume``
mode: the child's model calls (the worker's HTTP model, routed through the proxy)
and the tool calls of the child and its in-process descendants (the stand-in
parent's ``tool_tape``, which children inherit) are answered from the tape while they
are what the earlier attempt recorded, then go live and are recorded. Only the step
in flight when the earlier attempt died repeats (at least once). ``DIR`` must be
shared by the workers of a queue (as a directory result store is). Both reach the
tape in the worker's process without the proxy hop (the model through the proxy's
httpx transport when its adapter takes one, the tool calls by a direct call); the
proxy serves the child's own children in other processes.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import TYPE_CHECKING

from dsh.core import Context, model_from_env
from dsh.core.models import BoundModel, ModelConfig
from dsh.core.tapes import ToolTape

if TYPE_CHECKING:
    from dsh.tape import ClosableAdapter, TapeProxy

__all__ = ["AttemptTape"]

_LABEL = "openai"


def _model_config(ctx: Context) -> ModelConfig | None:
    config = ctx.defaults.model
    if config is None:
        found = model_from_env()
        config = found.config if found is not None else None
    return config


class AttemptTape:
    """The tape of one attempt of run ``run_id`` under ``root`` (see the module)."""

    def __init__(self, ctx: Context, root: str | Path, run_id: str) -> None:
        self.ctx = ctx
        self.directory = Path(root) / re.sub(r"[^A-Za-z0-9._-]", "_", run_id)
        self.proxy: TapeProxy | None = None
        self._adapter: ClosableAdapter | None = None

    async def open(self) -> tuple[BoundModel | None, ToolTape]:
        """Start the proxy; the model to give the child (the worker's own, through the
        proxy; None when it has no HTTP base URL) and the tool tape."""
        from dsh.tape import TapeProxy, TransportSeam

        config = _model_config(self.ctx)
        upstream = str(config.options.get("base_url") or "") if config is not None else ""
        proxy = TapeProxy(self.directory, "resume", {_LABEL: upstream} if upstream else {})
        await asyncio.to_thread(proxy.start)
        self.proxy = proxy
        model: BoundModel | None = None
        if config is not None and upstream:
            options = {**config.options, "base_url": proxy.base_url(_LABEL)}
            model = self.ctx.llm.bind(config.model_copy(update={"options": options}))
            if isinstance(model.adapter, TransportSeam):  # in process: no hop via the proxy
                self._adapter = model.adapter.with_transport(proxy.transport(_LABEL))
                model = BoundModel(self._adapter, model.model, model.options)
        return model, proxy.tool_tape()

    async def close(self) -> None:
        """Close the attempt's model client and stop the proxy (the tape stays for a
        later attempt)."""
        adapter, self._adapter = self._adapter, None
        proxy, self.proxy = self.proxy, None
        try:
            if adapter is not None:
                await adapter.aclose()
        finally:
            if proxy is not None:
                await asyncio.to_thread(proxy.close)
