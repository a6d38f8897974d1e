"""The claude-code provider with the real bundled Claude Code CLI, its model calls
answered from committed tapes.

Each test here runs the real CLI through the provider; its model calls (Anthropic
Messages, streamed) go through the ``tape`` fixture of dsh-testing (``cc_tape`` in
conftest.py): by default they are answered from ``tests/tapes/<name>/tape.jsonl``
with no model server running and no key, and the replay fails the test if the CLI
asks anything the tape does not hold. The CLI still runs for real (its tools in the
parent's cwd, its permission policy); the assertions check what it did and answered.

Re-record the tapes (after a CLI upgrade, or a change of a test's prompt or script)::

    uv run pytest --record-tapes \\
        packages/subagent/dsh-subagent-claude-code/tests/test_claude_code_taped.py

Without ``ANTHROPIC_API_KEY``, recording runs a fake Messages server with each test's
script (how the committed tapes were made); with it, the real API answers (whose words
the exact-text assertions do not expect). The test's temporary folder is ``<TMP>``
and dates are ``<DATE>`` on the tape (the fixture's normalisation, docs/tapes.md), so
a replay in another folder on another day matches.
Commit the changed ``tests/tapes/`` folders.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from dsh.tape import TapeProxy, read_tape
from dsh.testing.fixtures import progress_kinds
from dsh.testing.model_servers import AnthropicMessagesServer, MessagesReply, ToolUse
from dsh.testing.model_servers.anthropic_messages import reply_with_tool_result

if TYPE_CHECKING:
    from conftest import ClaudeCodeTapes

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

WATCH = "DSH-WATCH: what is six times seven?"
DENY = "DSH-DENY: create a file"


def watch_script(server: AnthropicMessagesServer) -> None:
    """The model of :func:`test_progress_shows_text_the_tool_call_its_result_and_usage_in_order`
    when its tape is recorded: a Bash call, then an answer."""
    server.when(
        "DSH-WATCH",
        MessagesReply(
            text="Let me count.",
            tool_uses=[ToolUse("Bash", {"command": "echo $((6 * 7))", "description": "multiply"})],
            usage={"input_tokens": 100, "output_tokens": 10},
        ),
        MessagesReply(text="It is 42.", usage={"input_tokens": 150, "output_tokens": 5}),
    )


def deny_script(server: AnthropicMessagesServer) -> None:
    """A Bash call that writes (denied under dontAsk), then an answer quoting the result."""
    server.when(
        "DSH-DENY",
        MessagesReply(tool_uses=[ToolUse("Bash", {"command": "touch denied.txt"})]),
        reply_with_tool_result("Could not: {output}"),
    )


def tool_results(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``tool_result`` blocks of a Messages request's last user message."""
    last = request["messages"][-1]
    content = last["content"] if isinstance(last["content"], list) else []
    return [block for block in content if block.get("type") == "tool_result"]


def result_text(block: dict[str, Any]) -> str:
    content = block["content"]
    return content if isinstance(content, str) else "".join(c.get("text", "") for c in content)


def asked_each_call_once(proxy: TapeProxy, calls: int) -> list[dict[str, Any]]:
    """The CLI made ``calls`` model calls, each answered from the tape (replaying) or
    written to it (recording); the requests as the tape holds them, which this run's
    matched one by one."""
    if proxy.mode == "record":
        assert proxy.recorded == calls
    else:
        assert proxy.divergence is None, proxy.divergence
        assert (proxy.replayed, proxy.remaining) == (calls, 0)
    return [e["request"] for e in read_tape(proxy.directory).exchanges]


async def test_progress_shows_text_the_tool_call_its_result_and_usage_in_order(
    cc_tape: ClaudeCodeTapes,
) -> None:
    """A tool call and a streamed answer: the CLI runs ``echo $((6 * 7))`` with Bash
    and sends the output back; progress shows it all in order."""
    async with cc_tape("cc-watch", watch_script, allowed_tools=["Bash"]) as setup:
        result, items = await setup.delegate_watching(WATCH)
    assert result.stop_reason == "completed", result
    assert result.output == "It is 42."
    assert progress_kinds(items) == ["text", "tool_call", "usage", "tool_update", "text", "usage"]
    assert all(item.path == () for item in items)
    text = "".join(item.text or "" for item in items if item.kind == "text")
    assert text == "Let me count.It is 42."  # streamed in deltas
    assert sum(item.kind == "text" for item in items) > 2
    (call,) = [item for item in items if item.kind == "tool_call"]
    assert (call.name, call.title) == ("Bash", "multiply")
    assert call.arguments == {"command": "echo $((6 * 7))", "description": "multiply"}
    (update,) = [item for item in items if item.kind == "tool_update"]
    assert (update.tool_call_id, update.name) == (call.tool_call_id, "Bash")
    assert (update.status, update.text) == ("completed", "42")  # a real shell ran it
    usages = [item.usage for item in items if item.kind == "usage"]
    assert [(u.input_tokens, u.output_tokens) for u in usages if u is not None] == [
        (100, 10),
        (250, 15),  # running totals after each model call
        (250, 15),  # the result's, with its cost
    ]
    assert usages[-1] == result.usage
    assert result.usage.cost_usd is not None
    assert result.usage.cost_usd > 0
    first, second = asked_each_call_once(cc_tape.tape.proxies[0], 2)
    assert first["model"] == "claude-sonnet-4-5"
    assert first["stream"] is True
    (block,) = tool_results(second)  # what this run's CLI sent after running the tool
    assert result_text(block).startswith("42\n")  # then the CLI's own system reminder
    assert not block.get("is_error")


async def test_write_under_dont_ask_is_denied_reported_to_the_model_and_answered(
    cc_tape: ClaudeCodeTapes,
) -> None:
    async with cc_tape("cc-deny", deny_script) as setup:
        result, items = await setup.delegate_watching(DENY)
        workdir: Path = setup.workdir
    assert result.stop_reason == "completed", result
    assert result.output.startswith("Could not: Permission to use Bash has been denied")
    assert not (workdir / "denied.txt").exists()
    assert result.diagnostic == (
        "1 tool call blocked by the permission policy (permission_mode dontAsk): Bash"
    )
    (update,) = [item for item in items if item.kind == "tool_update"]
    assert update.status == "failed"
    assert update.text is not None
    assert update.text.startswith("Permission to use Bash has been denied")
    _, second = asked_each_call_once(cc_tape.tape.proxies[0], 2)
    (block,) = tool_results(second)
    assert block.get("is_error")
    assert "don't ask mode" in result_text(block)


async def test_a_changed_prompt_is_reported_as_a_divergence(
    cc_tape: ClaudeCodeTapes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tape of the progress test, replayed (with the same normalisation) to a CLI
    asked something else: its first model call is not on the tape, the proxy answers
    409 and reports what changed, the run fails."""
    prompt = "DSH-WATCH: what is six times eight?"
    tape = cc_tape.tape
    with TapeProxy(tape.folder / "cc-watch", "replay", normalise=tape.normalisation()) as proxy:
        for variable, value in proxy.env().items():
            monkeypatch.setenv(variable, value)
        async with cc_tape.offline(allowed_tools=["Bash"]) as setup:
            result, _ = await setup.delegate_watching(prompt)
    assert result.stop_reason == "error", result
    assert result.diagnostic is not None
    assert result.diagnostic.startswith("claude-code: model API error (HTTP 409)")
    assert proxy.replayed == 0
    divergence = proxy.divergence
    assert divergence is not None
    assert (divergence.label, divergence.path, divergence.call) == (
        "claude-code",
        "/v1/messages?beta=true",
        0,
    )
    assert divergence.closest_seq == 1
    changed = [
        line
        for line in divergence.diff.splitlines()
        if line.startswith(("-", "+")) and not line.startswith(("---", "+++"))
    ]
    assert len(changed) == 2, divergence.diff
    assert WATCH in changed[0]
    assert prompt in changed[1]
