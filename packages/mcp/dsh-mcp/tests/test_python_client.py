"""The official MCP Python client against a real ``dsh mcp`` process, over stdio and
over streamable HTTP (each test runs on both), whose
children (spawn) run on a fake OpenAI chat server: the tool list, a call with progress,
a cancel that takes the child's process tree down, a failing child, structured output."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


async def test_each_subagent_row_is_one_tool_and_nothing_else(
    tmp_path: Path, preset: Path, kit: Any, transport: str
) -> None:
    async with kit.mcp_session(tmp_path, preset, transport) as session:
        listed = await session.list_tools()
    tools = {tool.name: tool for tool in listed.tools}
    assert set(tools) == {"delegate", "extract"}  # the shell is not served
    delegate = tools["delegate"]
    assert delegate.description
    assert "subagent" in delegate.description
    assert set(delegate.input_schema["properties"]) == {"description", "prompt"}
    assert delegate.output_schema is None
    assert tools["extract"].description == "Extract the answer as JSON."
    assert tools["extract"].output_schema == kit.ANSWER_SCHEMA


async def test_a_call_reports_progress_and_returns_the_answer_with_usage(
    tmp_path: Path, preset: Path, kit: Any, transport: str
) -> None:
    messages: list[str] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        messages.append(message or "")

    async with kit.mcp_session(tmp_path, preset, transport) as session:
        with anyio.fail_after(60):
            result = await session.call_tool(
                "delegate",
                {"description": "echo", "prompt": "ECHO something"},
                progress_callback=progress,
            )
    assert not result.is_error, result
    assert result.content[0].text == "child saw: echoed"  # type: ignore[union-attr]
    assert any(m.startswith("tool call: ") for m in messages), messages
    assert any("from-the-shell" in m for m in messages), messages
    assert any(m.startswith("usage: ") for m in messages), messages
    dsh: dict[str, Any] = (result.meta or {})["dsh"]
    assert dsh["stopReason"] == "completed"
    assert dsh["usage"]["input_tokens"] > 0


async def test_a_nested_delegations_progress_carries_its_path(
    tmp_path: Path, preset: Path, kit: Any, transport: str
) -> None:
    messages: list[str] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        messages.append(message or "")

    async with kit.mcp_session(tmp_path, preset, transport) as session:
        with anyio.fail_after(90):
            result = await session.call_tool(
                "delegate", {"description": "nest", "prompt": "NEST"}, progress_callback=progress
            )
    assert not result.is_error, result
    assert result.content[0].text == "nested done"  # type: ignore[union-attr]
    started = [m for m in messages if m.startswith("child ") and "started: inner" in m]
    assert started, messages
    assert any(m.startswith("[") and "tool call: " in m for m in messages), messages
    assert any(m.startswith("child ") and "ended: completed" in m for m in messages), "\n".join(
        messages
    )


async def test_cancelling_a_call_takes_the_childs_process_tree_down(
    tmp_path: Path, preset: Path, kit: Any, transport: str
) -> None:
    async with kit.mcp_session(tmp_path, preset, transport) as session:
        async with anyio.create_task_group() as group:

            async def call() -> None:
                await session.call_tool("delegate", {"description": "nap", "prompt": "SLEEP"})

            group.start_soon(call)
            await kit.wait_for("the child's sleep to start", lambda: bool(kit.sleepers()))
            group.cancel_scope.cancel()  # the client sends notifications/cancelled
        took = await kit.wait_for("the sleep to be gone", lambda: not kit.sleepers(), bound=2.0)
        assert took < 2.0
        # the server goes on serving
        with anyio.fail_after(60):
            result = await session.call_tool("delegate", {"description": "d", "prompt": "hi"})
        assert not result.is_error


async def test_a_failing_child_is_an_error_result_with_the_diagnostic(
    tmp_path: Path, preset: Path, kit: Any, transport: str
) -> None:
    async with kit.mcp_session(tmp_path, preset, transport) as session:
        with anyio.fail_after(60):
            result = await session.call_tool("delegate", {"description": "f", "prompt": "FAIL"})
    assert result.is_error
    text = result.content[0].text  # type: ignore[union-attr]
    assert "subagent run ended error" in text
    assert "refuses on purpose" in text
    assert (result.meta or {})["dsh"]["stopReason"] == "error"


async def test_a_row_with_an_output_schema_returns_structured_content(
    tmp_path: Path, preset: Path, kit: Any, transport: str
) -> None:
    async with kit.mcp_session(tmp_path, preset, transport) as session:
        with anyio.fail_after(60):
            result = await session.call_tool("extract", {"description": "x", "prompt": "EXTRACT"})
    assert not result.is_error, result
    assert result.structured_content == {"answer": "42"}


async def test_bad_arguments_and_unknown_tools_are_error_results(
    tmp_path: Path, preset: Path, kit: Any, transport: str
) -> None:
    async with kit.mcp_session(tmp_path, preset, transport) as session:
        with anyio.fail_after(60):
            missing = await session.call_tool("delegate", {"description": "no prompt"})
            unknown = await session.call_tool("shell", {"command": "true"})
    assert missing.is_error
    assert "prompt" in missing.content[0].text  # type: ignore[union-attr]
    assert unknown.is_error


async def test_a_dsh_callers_lineage_and_budget_place_the_child_in_its_tree(
    tmp_path: Path, preset: Path, kit: Any, transport: str
) -> None:
    async with kit.mcp_session(tmp_path, preset, transport) as session:
        with anyio.fail_after(60):
            at_limit = await session.call_tool(
                "delegate",
                {"description": "d", "prompt": "hi"},
                meta={"dsh": {"depth": 3, "maxDepth": 3}},
            )
            beyond = await session.call_tool(
                "delegate",
                {"description": "d", "prompt": "hi"},
                meta={"dsh": {"depth": 4, "maxDepth": 3}},
            )
            malformed = await session.call_tool(
                "delegate", {"description": "d", "prompt": "hi"}, meta={"dsh": {"depth": -1}}
            )
            below = await session.call_tool(
                "delegate",
                {"description": "d", "prompt": "hi"},
                meta={"dsh": {"depth": 1, "maxDepth": 3}},
            )
            no_budget = await session.call_tool(
                "delegate",
                {"description": "d", "prompt": "hi"},
                meta={"dsh": {"depth": 1, "maxDepth": 3, "maxDescendants": 0}},
            )
    assert at_limit.is_error
    assert "subagent depth 4 exceeds max_depth 3" in at_limit.content[0].text  # type: ignore[union-attr]
    assert beyond.is_error
    assert "subagent depth 4 exceeds max_depth 3" in beyond.content[0].text  # type: ignore[union-attr]
    assert malformed.is_error
    assert "invalid dsh lineage" in malformed.content[0].text  # type: ignore[union-attr]
    assert not below.is_error
    assert no_budget.is_error  # the caller's tree may start no more runs
    assert "max_descendants = 0" in no_budget.content[0].text  # type: ignore[union-attr]
