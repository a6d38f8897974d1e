"""The long-running tool of the parent-SIGKILL cell (loaded by the parent process of
``dsh.testing.faults``; not collected by pytest).

``install(ctx)`` registers ``fault_sleep``: it runs ``sleep 300`` through
:class:`dsh.subprocess.ChildProcess`, so the process is tagged with the run's tag
chain and registered with this process's watchdog, as every tool that starts a
process must; cancelling the call tears it down.
"""

from __future__ import annotations

from pydantic import BaseModel

from dsh.core import Context, Tool, ToolContext
from dsh.subprocess import ChildProcess, RunTag, scrubbed_env


class _NoArgs(BaseModel):
    pass


async def _sleep(args: _NoArgs, tctx: ToolContext) -> str:
    child = await ChildProcess.start(
        ["sleep", "300"], env=scrubbed_env(), cwd="/", what="fault tool", tag=RunTag()
    )
    try:
        return f"sleep exited with status {await child.wait()}"
    finally:
        await child.terminate(eof_grace=0, term_grace=0.5)


def install(ctx: Context) -> None:
    """Register the ``fault_sleep`` tool."""
    ctx.tools.register(Tool.from_model("fault_sleep", "Sleep for 300 s", _NoArgs, _sleep))
