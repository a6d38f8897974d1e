"""Issue 24, item 4, on Temporal: with ``dsh worker --tapes DIR`` a child's attempt 2
after a worker SIGKILL resumes from attempt 1's tape. The child (the worker's model:
the fake OpenAI chat server, which counts the calls) has made 3 model calls and 2
tool runs and is running its third tool when worker A is killed; on worker B the 3
completed model calls are answered from the tape (the server sees each call number
once) and the 2 completed tool runs are not run again; only the tool in flight runs
again (at least once)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest

from dsh.core import AbortSignal
from dsh.subagent import SubagentRuntime, SubagentStartRequest
from dsh.tape import read_tape
from dsh.testing.model_servers import OpenAIChatServer

pytestmark = pytest.mark.timeout(120)


@pytest.mark.anyio
async def test_attempt_2_resumes_from_the_tape_after_a_worker_sigkill(
    tk: Any, server: Any, tmp_path: Path
) -> None:
    runs, release, tapes = tmp_path / "runs.txt", tmp_path / "release", tmp_path / "tapes"
    with OpenAIChatServer(default=tk.three_tools(runs, release)) as model:
        preset = tmp_path / "worker.toml"
        preset.write_text(tk.TAPE_PRESET.format(base_url=model.api_base), encoding="utf-8")
        queue = f"tape-{uuid.uuid4().hex[:8]}"
        args = tk.worker_args(server, queue, preset, None, "--tapes", str(tapes))
        first = tk.WorkerProcess(args, "tape-a")
        second = None
        try:
            config = tk.provider_config(server, queue)
            async with tk.parent_context(config, tmp_path) as (ctx, provider):
                runtime = SubagentRuntime.of(ctx)
                request = SubagentStartRequest(
                    "run three tools", ctx.agents.create(), AbortSignal()
                )
                run = await runtime.start(provider.name, request)
                async with run:
                    # 3 model calls made, 2 tool runs done, the third tool running
                    await tk.wait_for(
                        lambda: runs.exists() and runs.read_text().split() == ["1", "2", "3"],
                        30,
                        lambda: (
                            f"the third tool never started: {first.output()[-3000:]}"
                            f" {run.result.peek()}"
                            f" {[r.json for r in model.requests]}"
                        ),
                    )
                    assert tk.call_numbers(model.requests) == {0: 1, 1: 1, 2: 1}
                    first.kill()  # SIGKILL mid-child
                    release.touch()
                    second = tk.WorkerProcess(args, "tape-b")
                    result = await asyncio.wait_for(run.result, 60)
            assert result.stop_reason == "completed", result
            assert result.output == "all three ran"
            # attempt 2: no completed model call repeated, only the last one is new
            assert tk.call_numbers(model.requests) == {0: 1, 1: 1, 2: 1, 3: 1}
            # the two completed tool runs were not run again; the one in flight was
            assert runs.read_text().split() == ["1", "2", "3", "3"]
            (tape_dir,) = list(tapes.iterdir())
            tape = read_tape(tape_dir)
            assert len(tape.exchanges) == 4
            assert [t["call"] for t in tape.tools] == [0, 1, 2]
        finally:
            first.kill()
            if second is not None:
                second.stop()
