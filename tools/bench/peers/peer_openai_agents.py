"""openai-agents: a parent whose tool is a child agent (``Agent.as_tool``).

Fake models (``agents.models.interface.Model``) answer at once: the parent first calls
its tool, then answers ``done: <the tool's output>``; the child answers ``child
answer``. Tracing is disabled (no export). Baseline: the same parent whose tool is a
``function_tool`` returning ``child answer``. Run with .venvs/bench-peers/bin/python.
"""

from __future__ import annotations

import json
from importlib.metadata import version
from typing import Any

from _timing import Turn, main
from agents import Agent, ModelResponse, Runner, Usage, function_tool, set_tracing_disabled
from agents.models.interface import Model
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)


def _message(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id="msg",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


def _tool_output(items: Any) -> str | None:
    if isinstance(items, list):
        for item in reversed(items):
            if isinstance(item, dict) and item.get("type") == "function_call_output":
                output = item["output"]
                return output if isinstance(output, str) else json.dumps(output)
    return None


class ParentModel(Model):
    def __init__(self, tool: str) -> None:
        self.tool = tool

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kw: Any
    ) -> ModelResponse:
        output = _tool_output(input)
        if output is None:
            call = ResponseFunctionToolCall(
                id="fc", call_id="call-1", type="function_call", name=self.tool,
                arguments=json.dumps({"input": "p"}), status="completed",
            )  # fmt: skip
            return ModelResponse(output=[call], usage=Usage(), response_id=None)
        return ModelResponse(output=[_message(f"done: {output}")], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kw: Any) -> Any:
        raise NotImplementedError


class ChildModel(Model):
    async def get_response(self, *args: Any, **kw: Any) -> ModelResponse:
        return ModelResponse(output=[_message("child answer")], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kw: Any) -> Any:
        raise NotImplementedError


def build() -> tuple[Turn, Turn]:
    set_tracing_disabled(True)
    child = Agent(name="child", instructions="Answer.", model=ChildModel())
    delegating = Agent(
        name="parent",
        instructions="Delegate.",
        model=ParentModel("subagent"),
        tools=[child.as_tool(tool_name="subagent", tool_description="Delegate a task.")],
    )

    @function_tool
    def constant(input: str) -> str:
        """Return a constant."""
        return "child answer"

    baseline = Agent(
        name="parent", instructions="Delegate.", model=ParentModel("constant"), tools=[constant]
    )

    async def with_child() -> str:
        return str((await Runner.run(delegating, "go")).final_output)

    async def without() -> str:
        return str((await Runner.run(baseline, "go")).final_output)

    return with_child, without


if __name__ == "__main__":
    main(build, f"openai-agents {version('openai-agents')}")
