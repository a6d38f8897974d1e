"""pydantic-ai: agent delegation through a tool (the pattern its docs call "agent
delegation": the tool runs the child agent and returns its output, passing
``usage=ctx.usage``).

Fake models are pydantic-ai's own ``FunctionModel``: the parent first calls its tool,
then answers ``done: <the tool's output>``; the child answers ``child answer``.
Baseline: the same parent whose tool returns ``child answer``. Run with
.venvs/bench-peers/bin/python.
"""

from __future__ import annotations

from importlib.metadata import version

from _timing import Turn, main
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel


def parent_model(tool: str) -> FunctionModel:
    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        if isinstance(last, ModelRequest):
            for part in last.parts:
                if isinstance(part, ToolReturnPart):
                    return ModelResponse(parts=[TextPart(f"done: {part.content}")])
        return ModelResponse(parts=[ToolCallPart(tool, {"prompt": "p"}, tool_call_id="call-1")])

    return FunctionModel(reply)


def child_model() -> FunctionModel:
    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("child answer")])

    return FunctionModel(reply)


def build() -> tuple[Turn, Turn]:
    child = Agent(child_model(), instructions="Answer.")
    delegating = Agent(parent_model("subagent"), instructions="Delegate.")
    baseline = Agent(parent_model("constant"), instructions="Delegate.")

    @delegating.tool
    async def subagent(ctx: RunContext[None], prompt: str) -> str:
        """Delegate a task."""
        result = await child.run(prompt, usage=ctx.usage)
        return result.output

    @baseline.tool
    async def constant(ctx: RunContext[None], prompt: str) -> str:
        """Return a constant."""
        return "child answer"

    async def with_child() -> str:
        return (await delegating.run("go")).output

    async def without() -> str:
        return (await baseline.run("go")).output

    return with_child, without


if __name__ == "__main__":
    main(build, f"pydantic-ai-slim {version('pydantic-ai-slim')}")
