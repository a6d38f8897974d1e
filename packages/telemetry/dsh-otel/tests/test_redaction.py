"""No span of a failing run carries a credential in a URL: not the turn's or the
delegation's status, not captured tool arguments (in-memory exporter)."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.trace import StatusCode
from pydantic import BaseModel

from dsh.core import Context, Tool, ToolContext, parse_preset

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

SECRET = "s3cret-Pa55"
URL = f"http://user:{SECRET}@127.0.0.1:9/v1?api_key={SECRET}"

PRESET = f"""
[agent.model]
adapter = "scripted"
[[agent.model.options.replies]]
tool_calls = [{{ name = "fetch", arguments = {{ url = "{URL}" }} }}]
[[agent.model.options.replies]]
tool_calls = [{{ name = "subagent", arguments = {{ description = "ask", prompt = "go" }} }}]
[[agent.model.options.replies]]
error = "cannot connect to {URL}"

[[plugin]]
name = "dsh-otel"
config = {{ capture_tool_arguments = true }}

[[plugin]]
name = "dsh-subagent-spawn-in-process"

[[plugin]]
name = "dsh-tool-subagent"
config.provider = "spawn"
config.tool_name = "subagent"
config.agent_options.model.adapter = "scripted"
config.agent_options.model.options.replies = [{{ error = "cannot connect to {URL}" }}]
"""


class FetchArgs(BaseModel):
    url: str


async def test_a_failing_run_exports_no_credentials(spans: Any) -> None:
    async def fetch(args: FetchArgs, tctx: ToolContext) -> str:
        raise RuntimeError(f"cannot fetch {args.url}")

    async with Context.open(parse_preset(PRESET)) as ctx:
        ctx.tools.register(Tool.from_model("fetch", "Fetch a URL.", FetchArgs, fetch))
        outcome = await ctx.agents.create().run("go")
    assert outcome.stop_reason == "error"

    exported = "\n".join(span.to_json() for span in spans.all())
    assert SECRET not in exported
    where = "http://***@127.0.0.1:9/v1?api_key=***"
    turn = spans.one("invoke_agent")
    assert turn.status.status_code == StatusCode.ERROR
    assert turn.status.description == f"error: model call failed: cannot connect to {where}"
    delegation = spans.one("invoke_agent ask")
    assert delegation.status.status_code == StatusCode.ERROR
    assert where in (delegation.status.description or "")
    tool = spans.one("execute_tool fetch")
    assert dict(tool.attributes or {})["gen_ai.tool.call.arguments"] == f'{{"url": "{where}"}}'
