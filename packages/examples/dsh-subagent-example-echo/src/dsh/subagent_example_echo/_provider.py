"""The ``echo`` provider: a whole subagent provider on the kit, in one page.

The region between the markers is shown verbatim in docs/writing-a-provider.md
(a test keeps the two identical).
"""

from __future__ import annotations

# --8<-- [start:provider]
import sys

from dsh.core import Context, EffectScope, Plugin
from dsh.subagent import (
    NO_START_CAPABILITIES,
    SubagentProgress,
    SubagentResult,
    SubagentRun,
    SubagentRuntime,
    SubagentStartRequest,
)
from dsh.subprocess import SubprocessConfig, SubprocessRun

# The child, a tiny line protocol: "prompt <text>" is answered "word <w>" per word,
# then "done <text>"; at the word "hang" it waits for "cancel" (answered "cancelled");
# "fail" exits with a message on stderr.
CHILD = """
import sys
for line in sys.stdin:
    command, _, text = line.rstrip().partition(" ")
    if command == "cancel":
        print("cancelled", flush=True)
    elif text == "fail":
        sys.exit("echo child: failing on purpose")
    else:
        for word in text.split():
            if word == "hang":
                break
            print("word", word, flush=True)
        else:
            print("done", text, flush=True)
"""


class EchoConfig(SubprocessConfig):
    """The fields every subprocess provider shares; the echo child by default."""

    name: str = "echo"
    """Provider name in ``ctx.subagents``."""
    command: str = sys.executable
    args: list[str] = ["-c", CHILD]


class EchoRun(SubprocessRun):
    """One run. The kit calls these hooks and does the rest: publication, settling
    once, the signal, timeouts, teardown of the process group, diagnostics."""

    words: list[str]

    async def open(self) -> None:  # raced against the signal and start_timeout
        self.words = []
        await self.spawn()

    async def turn(self) -> SubagentResult:  # raced against cancel and turn_timeout
        assert self.child is not None
        assert self.handle is not None
        prompt = " ".join(self.request.prompt_text.split())
        self.child.stdin.write(f"prompt {prompt}\n".encode())
        await self.child.stdin.drain()
        while line := (await self.child.stdout.readline()).decode():
            kind, _, text = line.rstrip().partition(" ")
            if kind == "word":
                self.words.append(text)
                self.handle.emit(SubagentProgress("text", text=text + " "))
            elif kind == "done":  # usage: unknown, the default of RemoteRun.usage()
                return SubagentResult(text, "completed")
            elif kind == "cancelled":  # within cancel_grace: the run settles with this
                return SubagentResult.aborted(f"{self.stop.reason}; the echo child stopped")
        code = await self.child.wait()  # the diagnostic also gets the stderr tail
        raise RuntimeError(f"the echo child exited with status {code}")

    async def cancel(self) -> bool:  # True: the request went out
        assert self.child is not None
        self.child.stdin.write(b"cancel\n")
        await self.child.stdin.drain()
        return True

    def partial_output(self) -> str:  # the output of a run that did not finish
        return " ".join(self.words)


class EchoProvider:
    capabilities = NO_START_CAPABILITIES  # no optional start-request field
    inherits_parent_context = False  # the child sees only its prompt

    def __init__(self, config: EchoConfig) -> None:
        self.name, self.config = config.name, config

    async def start(self, request: SubagentStartRequest) -> SubagentRun:
        return await EchoRun(self.name, request, self.config).launch()


def apply(ctx: Context, config: EchoConfig, effects: EffectScope) -> None:
    """Register an echo provider named ``config.name``."""
    config.sandbox_policy(ctx.sandbox, strict=True, what=f'the "{config.name}" provider')
    effects.add(SubagentRuntime.of(ctx).register_provider(EchoProvider(config)))


plugin = Plugin("dsh-subagent-example-echo", apply, EchoConfig)
# --8<-- [end:provider]
