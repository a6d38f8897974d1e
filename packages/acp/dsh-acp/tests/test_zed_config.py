"""The Zed configuration in docs/zed.md, run as Zed runs it: the documented command,
args and env (absolute paths filled in), a real ACP client, a real prompt."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from acp import PROTOCOL_VERSION, Client, connect_to_agent
from acp.schema import TextContentBlock

from dsh.testing.model_servers import OpenAIChatServer

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

DOC = Path(__file__).resolve().parents[4] / "docs" / "zed.md"


def documented_server() -> dict[str, Any]:
    blocks = re.findall(r"```json\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    settings = json.loads(blocks[0])
    server: dict[str, Any] = settings["agent_servers"]["dsh"]
    return server


class Collect(Client):
    def __init__(self) -> None:
        self.text = ""

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if getattr(update, "session_update", None) == "agent_message_chunk":
            self.text += getattr(update.content, "text", "")

    async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("no tool asks in this test")


async def test_the_documented_zed_configuration_works(tmp_path: Path) -> None:
    server = documented_server()
    assert server["type"] == "custom"
    dsh = shutil.which("dsh", path=os.path.dirname(sys.executable))
    assert dsh is not None, "the dsh command is not installed next to this Python"
    preset = tmp_path / "dsh.toml"
    preset.write_text('extends = "standard"\n', encoding="utf-8")
    command = server["command"].replace("/ABSOLUTE/PATH/TO/bin/dsh", dsh)
    args = [a.replace("/ABSOLUTE/PATH/TO/dsh.toml", str(preset)) for a in server["args"]]
    assert os.path.isabs(command)
    assert all("ABSOLUTE" not in a for a in args)
    async with OpenAIChatServer(default="Hello from the model behind Zed") as model:
        env = {
            "PATH": "/usr/bin:/bin",  # Zed's environment, not ours: only what is documented
            "HOME": str(tmp_path),
            "OPENAI_API_KEY": "fake",
            "OPENAI_BASE_URL": model.api_base,
        }
        assert set(server["env"]) == {"DEEPSEEK_API_KEY"}  # the documented key; ours: OpenAI
        process = await asyncio.create_subprocess_exec(
            command, *args, env=env, cwd=tmp_path,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert process.stdin is not None
        assert process.stdout is not None
        client = Collect()
        conn = connect_to_agent(client, process.stdin, process.stdout)
        try:
            with anyio.fail_after(60):
                await conn.initialize(protocol_version=PROTOCOL_VERSION)
                session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
                answer = await conn.prompt(
                    session_id=session.session_id, prompt=[TextContentBlock(type="text", text="hi")]
                )
        finally:
            await conn.close()
            process.stdin.close()
            with anyio.fail_after(15):
                await process.wait()
    assert answer.stop_reason == "end_turn"
    assert client.text == "Hello from the model behind Zed"
