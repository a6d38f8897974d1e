"""``Context.open(record=DIR)``: a recording tape proxy for one context (the entry point
``tape`` of :data:`dsh.core.tapes.RECORDER_GROUP`).

The context's default model (the preset's ``[agent.model]``, else the environment's),
when it is an HTTP model with a ``base_url``, records through the proxy's in-process
transport, and every agent created afterwards puts its tool calls on the tape by a
direct call (:func:`dsh.tape.attach`); ``DSH_TAPE_PROXY`` (plus ``OPENAI_BASE_URL`` for
an environment model, which an ``acp`` row hands on) is set in ``os.environ`` until the
context closes, so the dsh processes it starts record into the same tape through the
proxy.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from dsh.core import Context
from dsh.core.tapes import TAPE_PROXY_VARIABLE
from dsh.tape._attach import attach, context_model
from dsh.tape._proxy import TapeProxy

__all__ = ["start"]

_LABEL = "openai"


def start(ctx: Context, directory: str | os.PathLike[str]) -> Callable[[], None]:
    """Start recording ``ctx`` into ``directory``; returns the function that stops it
    (and restores the environment)."""
    config = context_model(ctx)
    from_env = ctx.defaults.model is None
    upstream = str(config.options.get("base_url") or "") if config is not None else ""
    meta: dict[str, Any] = {"model": config.model} if config is not None else {}
    proxy = TapeProxy(directory, "record", {_LABEL: upstream} if upstream else {}, meta=meta)
    proxy.start()
    variables = {TAPE_PROXY_VARIABLE: proxy.proxy_url}
    if config is not None and upstream and from_env:
        variables["OPENAI_BASE_URL"] = proxy.base_url(_LABEL)
    attach(ctx, proxy, _LABEL)
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)

    def stop() -> None:
        try:
            proxy.close()
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

    return stop
