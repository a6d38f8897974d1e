"""A context's own model and tool calls on a tape in the same process: :func:`attach`.

The proxy stays for the other processes of the tree (``DSH_TAPE_PROXY``,
``OPENAI_BASE_URL``); the context's agents reach the tape without it — their tool
calls by a direct call (:meth:`~dsh.tape.TapeProxy.tool_tape`), their model's HTTP
calls through a :class:`~dsh.tape.TapeTransport` when the model's adapter accepts one
(:class:`TransportSeam`; dsh-llm-openai's does), else through the proxy as before.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import httpx

from dsh.core import Context, ModelAdapter, model_from_env
from dsh.core.models import BoundModel, ModelConfig
from dsh.tape._proxy import TapeProxy

__all__ = ["ClosableAdapter", "TransportSeam", "attach", "context_model", "taped_model"]


class ClosableAdapter(ModelAdapter, Protocol):
    """A model adapter that holds connections (closed by :meth:`aclose`)."""

    async def aclose(self) -> None:
        """Close its connections."""


@runtime_checkable
class TransportSeam(Protocol):
    """An adapter whose HTTP calls can go through another httpx transport:
    ``with_transport`` returns the same model over it (with a client of its own)."""

    def with_transport(self, transport: httpx.AsyncBaseTransport) -> ClosableAdapter:
        """The same model over ``transport``."""
        ...


def context_model(ctx: Context) -> ModelConfig | None:
    """The context's default model config: the preset's ``[agent.model]``, else the
    environment's (None: neither names one)."""
    config = ctx.defaults.model
    if config is None:
        found = model_from_env()
        config = found.config if found is not None else None
    return config


def taped_model(ctx: Context, proxy: TapeProxy, config: ModelConfig, label: str) -> BoundModel:
    """``config`` bound with its ``base_url`` replaced by the proxy's route for ``label``,
    over the proxy's in-process transport when the adapter takes one (closed with
    ``ctx``)."""
    options = {**config.options, "base_url": proxy.base_url(label)}
    bound = ctx.llm.bind(config.model_copy(update={"options": options}))
    if isinstance(bound.adapter, TransportSeam):
        adapter = bound.adapter.with_transport(proxy.transport(label))
        ctx.on_close(adapter.aclose)
        bound = BoundModel(adapter, bound.model, bound.options)
    return bound


def attach(ctx: Context, proxy: TapeProxy, label: str = "openai") -> None:
    """Put ``ctx``'s agents on ``proxy``'s tape in process: their tool calls
    (``ctx.tool_tape``) and, when it is an HTTP model with a ``base_url`` whose
    upstream the proxy knows as ``label`` (or that points at the proxy), the context's
    default model."""
    config = context_model(ctx)
    base = str(config.options.get("base_url") or "") if config is not None else ""
    if config is not None and base:
        ctx.route_default_model(taped_model(ctx, proxy, config, label))
    ctx.tool_tape = proxy.tool_tape()
