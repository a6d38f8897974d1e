"""Drives ``dsh acp`` with the Python ACP SDK (``agent-client-protocol``, whichever version
is installed: 0.12 in the workspace, 1.0 in ``tools/check_acp_1.sh``'s environment).

    python acp_sdk_client.py CWD -- COMMAND [ARG...]

The scenario of ``acp_sdk_client.mjs`` (the TypeScript SDK), as far as this SDK goes:
initialize, session/new, streamed prompts, a tool call, ``session/cancel`` once the turn
runs, then a prompt after the cancel. Prints one JSON line on stdout: the SDK's version,
the initialize and session/new results, each turn (its prompt, stop reason, the updates the
SDK handed to the client, parsed by its models, and the raw ``session/update`` messages on
the wire) and the agent's exit code. Uses only the SDK's public client API, and builds its
content blocks from the schema models (1.0 removed the helper functions).
"""

from __future__ import annotations

import asyncio
import json
import sys
from importlib.metadata import version
from typing import Any

from acp import PROTOCOL_VERSION, Client, connect_to_agent
from acp.schema import (
    AllowedOutcome,
    Implementation,
    PermissionOption,
    RequestPermissionResponse,
    TextContentBlock,
    ToolCallUpdate,
)

WAIT = 60.0


class Recorder(Client):
    """Keeps every update the SDK delivers, and every raw one on the wire."""

    def __init__(self) -> None:
        self.delivered: list[dict[str, Any]] = []
        self.raw: list[dict[str, Any]] = []
        self.permissions: list[str] = []
        self.changed = asyncio.Event()

    def observe(self, event: Any) -> None:
        message = event.message
        if event.direction == "incoming" and message.get("method") == "session/update":
            self.raw.append(message["params"])

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.delivered.append(update.model_dump(mode="json", by_alias=True, exclude_none=True))
        self.changed.set()

    async def request_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption], **kw: Any
    ) -> RequestPermissionResponse:
        self.permissions.append(tool_call.tool_call_id)
        outcome = AllowedOutcome(outcome="selected", option_id="allow_once")
        return RequestPermissionResponse(outcome=outcome)

    async def wait_for_tool_done(self, start: int) -> None:
        async with asyncio.timeout(WAIT):
            while not any(
                u.get("sessionUpdate") == "tool_call_update" and u.get("status") == "completed"
                for u in self.delivered[start:]
            ):
                self.changed.clear()
                await self.changed.wait()


async def main(cwd: str, command: list[str]) -> dict[str, Any]:
    recorder = Recorder()
    agent = await asyncio.create_subprocess_exec(
        *command, cwd=cwd, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    assert agent.stdin is not None
    assert agent.stdout is not None
    conn = connect_to_agent(recorder, agent.stdin, agent.stdout, observers=[recorder.observe])
    try:
        async with asyncio.timeout(WAIT):
            initialize = await conn.initialize(
                protocol_version=PROTOCOL_VERSION,
                client_info=Implementation(name="acp_sdk_client.py", version="0"),
            )
            session = await conn.new_session(cwd=cwd, mcp_servers=[])
        turns = []
        for text, cancel in (
            ("hi there", None),
            ("please use the tool", None),
            ("please hang", "session/cancel"),
            ("still there?", None),
        ):
            start, raw_start = len(recorder.delivered), len(recorder.raw)
            prompt: list[Any] = [TextContentBlock(type="text", text=text)]
            answer = asyncio.ensure_future(
                conn.prompt(session_id=session.session_id, prompt=prompt)
            )
            if cancel:  # the turn is running once its echo call is done (the model then hangs)
                await recorder.wait_for_tool_done(start)
                await conn.cancel(session_id=session.session_id)
            async with asyncio.timeout(WAIT):
                response = await answer
            turns.append(
                {
                    "prompt": text,
                    "cancel": cancel,
                    "stopReason": response.stop_reason,
                    "updates": recorder.delivered[start:],
                    "raw": recorder.raw[raw_start:],
                }
            )
    finally:
        await conn.close()
        agent.stdin.close()
        try:
            async with asyncio.timeout(15):
                code = await agent.wait()
        except TimeoutError:
            agent.kill()
            code = await agent.wait()
    return {
        "sdk": f"agent-client-protocol@{version('agent-client-protocol')}",
        "initialize": initialize.model_dump(mode="json", by_alias=True, exclude_none=True),
        "session": session.model_dump(mode="json", by_alias=True, exclude_none=True),
        "turns": turns,
        "permissions": recorder.permissions,
        "exitCode": code,
    }


if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit("usage: python acp_sdk_client.py CWD -- COMMAND [ARG...]")
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[3:]))))
