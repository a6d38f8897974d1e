"""The real ``codex app-server`` with its model calls answered from committed tapes.

Each test here runs the pinned real codex through the codex provider; its model
calls (OpenAI Responses, streamed) go through the ``tape`` fixture of dsh-testing
(``codex_tape`` in conftest.py): by default they are answered from
``tests/tapes/<name>/tape.jsonl`` with no model server running and no key, and the
replay fails the test if codex asks anything the tape does not hold. Codex still runs
for real: it starts, streams, runs its tools in its sandbox, writes files; the
assertions check what it did and what it answered.

Re-record the tapes (after a codex upgrade, or a change of a test's prompt or script)::

    uv run pytest --record-tapes packages/subagent/dsh-subagent-codex/tests/test_codex_taped.py

Without ``OPENAI_API_KEY``, recording runs a fake Responses server with the scripts
below (how the committed tapes were made); with it, the real API answers (whose words
the exact-text assertions do not expect). The test's temporary folder is ``<TMP>``
and dates are ``<DATE>`` on the tape (the fixture's normalisation, docs/tapes.md), so
a replay in another folder on another day matches.
Commit the changed ``tests/tapes/`` folders.
"""

from __future__ import annotations

import itertools
from typing import Any

import anyio
import pytest

from dsh.core import AbortSignal
from dsh.subagent import SubagentProgress, SubagentRuntime, SubagentStartRequest
from dsh.tape import TapeProxy, read_tape
from dsh.testing.model_servers.openai_responses import (
    FunctionCall,
    OpenAIResponsesServer,
    ResponsesReply,
    reply_with_tool_output,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

PATCH = "apply_patch <<'EOF'\n*** Begin Patch\n*** Add File: notes.txt\n+hello\n*** End Patch\nEOF"


def scripts(server: OpenAIResponsesServer) -> None:
    """What the fake model answers when a tape is recorded (besides the standard rules:
    ``run echo`` calls ``echo hi``, then says ``Tool said: <output>``)."""
    server.when(
        "narrate then echo",
        ResponsesReply(
            text="Running echo now.",
            function_calls=[FunctionCall("exec_command", {"cmd": "echo hi"})],
        ),
        reply_with_tool_output("Tool said: {output}"),
    )
    server.when(
        "patch then break",
        ResponsesReply(function_calls=[FunctionCall("exec_command", {"cmd": PATCH})]),
        ResponsesReply(function_calls=[FunctionCall("exec_command", {"cmd": "seq 1 500; exit 3"})]),
        ResponsesReply(text="Done with errors."),
    )


async def watch(ctx: Any, parent: Any, prompt: str) -> tuple[Any, list[SubagentProgress]]:
    """Start a codex run, read its whole progress stream, return the result and the items."""
    run = await SubagentRuntime.of(ctx).start(
        "codex", SubagentStartRequest(prompt, parent, AbortSignal())
    )
    items: list[SubagentProgress] = []
    try:
        with anyio.fail_after(30):
            async for item in run.progress():
                items.append(item)
            assert run.settled  # the iteration ended because the run settled
            result = await run.result
    finally:
        await run.dispose()
    return result, items


def kinds_in_order(items: list[SubagentProgress]) -> list[str]:
    """The item kinds, consecutive repeats folded."""
    return [kind for kind, _ in itertools.groupby(item.kind for item in items)]


def exchanges(proxy: TapeProxy) -> list[dict[str, Any]]:
    """The model exchanges on the tape, after the run: what this run's requests matched
    one by one (replaying), or what they were (recording), normalised."""
    return read_tape(proxy.directory).exchanges


def outputs(request: dict[str, Any]) -> list[str]:
    """The tool outputs a Responses request hands back to the model, in order."""
    return [
        str(item.get("output"))
        for item in request.get("input") or ()
        if item.get("type") == "function_call_output"
    ]


def asked_each_call_once(proxy: TapeProxy, calls: int) -> None:
    """Codex made ``calls`` model calls, each answered from the tape (replaying) or
    written to it (recording)."""
    if proxy.mode == "record":
        assert proxy.recorded == calls
    else:
        assert proxy.divergence is None, proxy.divergence
        assert (proxy.replayed, proxy.remaining) == (calls, 0)


async def delegate(ctx: Any, parent: Any, prompt: str) -> Any:
    """Start a codex run, await its result, dispose it."""
    run = await SubagentRuntime.of(ctx).start(
        "codex", SubagentStartRequest(prompt, parent, AbortSignal())
    )
    try:
        with anyio.fail_after(30):
            return await run.result
    finally:
        await run.dispose()


async def test_tool_round_trip_runs_exec_command(codex_tape: Any) -> None:
    """A tool call and a streamed answer: codex runs ``echo hi`` in its sandbox and
    sends the output back; the model's answer quotes it."""
    codex = codex_tape("codex-echo")
    (proxy,) = codex_tape.tape.proxies
    async with codex.context(permission_mode="full-access") as (ctx, parent):
        result = await delegate(ctx, parent, "run echo for me")
    assert result.stop_reason == "completed", result
    assert result.output.startswith("Tool said: ")
    assert result.output.rstrip().endswith("Output:\nhi")
    assert result.usage.input_tokens > 0
    asked_each_call_once(proxy, 2)
    first, second = (e["request"] for e in exchanges(proxy))
    assert "run echo for me" in str(first["input"])
    assert outputs(first) == []
    (output,) = outputs(second)  # what this run's codex sent after running the tool
    assert "Process exited with code 0" in output
    assert output.rstrip().endswith("hi")


async def test_a_tool_round_trip_streams_text_tool_call_tool_update_and_usage(
    codex_tape: Any,
) -> None:
    codex = codex_tape("codex-narrate-then-echo", scripts)
    async with codex.context(permission_mode="full-access") as (ctx, parent):
        on_bus: list[Any] = []
        ctx.events.on("subagent/progress", lambda e: on_bus.append(e.data))
        result, items = await watch(ctx, parent, "narrate then echo")
    assert result.stop_reason == "completed", result
    assert result.output.rstrip().endswith("Output:\nhi")
    kinds = kinds_in_order(items)
    first = [kinds.index(kind) for kind in ("text", "tool_call", "tool_update", "usage")]
    assert first == sorted(first), kinds
    assert kinds[-1] == "usage"  # the totals of the last model call come last
    assert all(item.path == () for item in items)
    (call,) = [i for i in items if i.kind == "tool_call"]
    assert call.name == "exec_command"
    assert call.title is not None
    assert "echo hi" in call.title
    assert call.arguments == {"command": call.title}
    (update,) = [i for i in items if i.kind == "tool_update"]
    assert update.tool_call_id == call.tool_call_id
    assert update.status == "completed"
    assert update.text == "hi\n"  # the real shell's output
    text = "".join(i.text or "" for i in items if i.kind == "text")
    assert text.startswith("Running echo now.")
    assert text.endswith(result.output)
    usage = [i.usage for i in items if i.kind == "usage"]
    assert usage[-1] == result.usage
    assert usage[0] is not None
    assert 0 < usage[0].input_tokens < result.usage.input_tokens  # running totals
    assert [entry["item"] for entry in on_bus] == items
    (run_id,) = {entry["run_id"] for entry in on_bus}
    assert run_id.startswith("codex-")
    asked_each_call_once(codex_tape.tape.proxies[0], 2)


async def test_file_changes_and_failed_commands(codex_tape: Any) -> None:
    """Three model calls: codex applies a patch (a file on disk), runs a failing
    command, then answers."""
    codex = codex_tape("codex-patch-then-break", scripts)
    async with codex.context(permission_mode="full-access") as (ctx, parent):
        result, items = await watch(ctx, parent, "patch then break")
    assert result.stop_reason == "completed", result
    assert result.output == "Done with errors."
    assert (codex.workspace / "notes.txt").read_text() == "hello\n"
    calls = [i for i in items if i.kind == "tool_call"]
    updates = [i for i in items if i.kind == "tool_update"]
    assert [c.name for c in calls] == ["apply_patch", "exec_command"]
    patch, failing = calls
    assert patch.title == str(codex.workspace / "notes.txt")
    assert patch.arguments == {"paths": [patch.title]}
    assert [(u.tool_call_id, u.status) for u in updates] == [
        (patch.tool_call_id, "completed"),
        (failing.tool_call_id, "failed"),  # exit code 3
    ]
    excerpt = updates[1].text
    assert excerpt is not None
    assert len(excerpt) <= 400
    assert excerpt.startswith("1\n2\n3\n")
    asked_each_call_once(codex_tape.tape.proxies[0], 3)


async def test_a_changed_prompt_is_reported_as_a_divergence(
    codex_tape: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tape of :func:`test_tool_round_trip_runs_exec_command`, replayed (with the
    same normalisation) to a codex asked something else: its first model call is not
    on the tape, the proxy answers 409 and reports where and what changed, the run
    fails, and nothing else of the request differs (the folder, date and ids are
    normalised)."""
    tape = codex_tape.tape
    normalise = tape.normalisation()
    with TapeProxy(tape.folder / "codex-echo", "replay", normalise=normalise) as proxy:
        for variable, value in proxy.env().items():
            monkeypatch.setenv(variable, value)
        codex = codex_tape.offline()
        async with codex.context(permission_mode="full-access") as (ctx, parent):
            result = await delegate(ctx, parent, "run echo for me twice")
    assert result.stop_reason == "error", result
    assert "409" in result.diagnostic
    assert proxy.replayed == 0
    divergence = proxy.divergence
    assert divergence is not None
    assert (divergence.label, divergence.path, divergence.call) == ("codex", "/responses", 0)
    assert divergence.closest_seq == 1
    changed = [
        line[0] + line[1:].strip()
        for line in divergence.diff.splitlines()
        if line.startswith(("-", "+")) and not line.startswith(("---", "+++"))
    ]
    assert changed == [
        '-"text": "run echo for me",',
        '+"text": "run echo for me twice",',
    ], divergence.diff
