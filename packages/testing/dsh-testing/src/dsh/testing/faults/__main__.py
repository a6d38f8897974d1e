"""``python -m dsh.testing.faults parent SPEC.json``: the parent process of the
parent-SIGKILL cell."""

from __future__ import annotations

import importlib.util
import inspect
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import anyio

from dsh.core import (
    AbortSignal,
    Context,
    parse_preset,
)
from dsh.subagent import (
    SubagentRuntime,
    SubagentStartRequest,
)

# -- the parent process of the parent-SIGKILL cell ---------------------------------------


def _setup_function(reference: str) -> Callable[[Context], Any]:
    path, _, name = reference.rpartition(":")
    spec = importlib.util.spec_from_file_location(f"_dsh_fault_setup_{abs(hash(path))}", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load the setup module {path!r}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    function: Callable[[Context], Any] = getattr(module, name)
    return function


async def _parent(spec: Mapping[str, Any]) -> None:
    async with Context.open(parse_preset(spec["preset"]), cwd=spec["cwd"]) as ctx:
        if spec.get("setup"):
            done = _setup_function(spec["setup"])(ctx)
            if inspect.isawaitable(done):
                await done
        for index, (name, config) in enumerate(spec["plugins"]):
            await ctx.plugins.load(name, config, id=f"{name}#{index}")
        parent = ctx.agents.create()
        request = SubagentStartRequest(
            spec["prompt"], parent, AbortSignal(), agent_options=spec.get("agent_options")
        )
        await SubagentRuntime.of(ctx).start(spec["provider"], request)
        print("published", flush=True)
        await anyio.sleep_forever()


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m dsh.testing.faults parent SPEC.json``: the parent process of the
    parent-SIGKILL cell (see :class:`ParentProcess`); it runs until killed."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0] != "parent":
        raise SystemExit("usage: python -m dsh.testing.faults parent SPEC.json")
    with open(args[1], encoding="utf-8") as handle:
        spec = json.load(handle)
    anyio.run(_parent, spec)


if __name__ == "__main__":
    main()
