"""Google ADK: a parent ``LlmAgent`` whose tool is a child agent (``AgentTool``).

Fake models (``BaseLlm`` subclasses) answer at once: the parent first calls its tool,
then answers ``done: <the tool's result>``; the child answers ``child answer``. Each
turn is one ``InMemoryRunner.run_async`` on a fresh in-memory session. Baseline: the
same parent whose tool is a function returning ``child answer``. Run with
.venvs/bench-peers/bin/python.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from importlib.metadata import version
from typing import Any

from _timing import Turn, main
from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import InMemoryRunner
from google.adk.tools.agent_tool import AgentTool
from google.genai import types

# Usage reported like a real model's (without it ADK logs a warning on every call).
USAGE = types.GenerateContentResponseUsageMetadata(
    prompt_token_count=1, candidates_token_count=1, total_token_count=2
)


def _text(text: str) -> LlmResponse:
    content = types.Content(role="model", parts=[types.Part(text=text)])
    return LlmResponse(content=content, usage_metadata=USAGE)


class ParentLlm(BaseLlm):
    tool: str

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        last = llm_request.contents[-1] if llm_request.contents else None
        for part in (last.parts or []) if last else []:
            if part.function_response is not None:
                response: Any = part.function_response.response or {}
                yield _text(f"done: {response.get('result', response)}")
                return
        call = types.FunctionCall(name=self.tool, args={"request": "p"})
        content = types.Content(role="model", parts=[types.Part(function_call=call)])
        yield LlmResponse(content=content, usage_metadata=USAGE)


class ChildLlm(BaseLlm):
    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        yield _text("child answer")


def build() -> tuple[Turn, Turn]:
    child = LlmAgent(name="child", model=ChildLlm(model="fake-child"), instruction="Answer.")
    delegating = LlmAgent(
        name="parent",
        model=ParentLlm(model="fake-parent", tool="child"),
        instruction="Delegate.",
        tools=[AgentTool(agent=child)],
    )

    def constant(request: str) -> str:
        """Return a constant."""
        return "child answer"

    baseline = LlmAgent(
        name="parent",
        model=ParentLlm(model="fake-parent", tool="constant"),
        instruction="Delegate.",
        tools=[constant],
    )

    def turn(agent: LlmAgent) -> Turn:
        runner = InMemoryRunner(agent=agent, app_name="bench")
        message = types.Content(role="user", parts=[types.Part(text="go")])

        async def run() -> str:
            session = await runner.session_service.create_session(app_name="bench", user_id="u")
            answer = ""
            async for event in runner.run_async(
                user_id="u", session_id=session.id, new_message=message
            ):
                if event.is_final_response() and event.content and event.content.parts:
                    answer = "".join(p.text or "" for p in event.content.parts)
            return answer

        return run

    return turn(delegating), turn(baseline)


if __name__ == "__main__":
    main(build, f"google-adk {version('google-adk')}")
