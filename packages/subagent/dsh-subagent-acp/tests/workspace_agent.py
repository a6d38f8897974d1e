"""An ACP agent that uses its client's files and terminals (run as a child process).

    python workspace_agent.py

Each prompt is a JSON list of steps, each ``[method, params]`` with ``method`` one of
``read`` (``fs/read_text_file``), ``write`` (``fs/write_text_file``), ``create``
(``terminal/create``), ``output``, ``wait``, ``kill``, ``release`` (the other
``terminal/*``, on the last terminal created unless ``terminalId`` is given) and
``caps`` (the client capabilities ``initialize`` offered). The agent sends each
request to its client in turn, and answers with one message: a JSON list with, per
step, ``{"ok": result}`` or ``{"error": {"code", "message"}}``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from acp import RequestError
from acp.schema import ClientCapabilities, Implementation, InitializeResponse

from dsh.acp import PromptBlock, serve_stdio
from dsh.testing.mock_acp_agent import AcpTestAgent, prompt_text

METHODS = {
    "read": "fs/read_text_file",
    "write": "fs/write_text_file",
    "create": "terminal/create",
    "output": "terminal/output",
    "wait": "terminal/wait_for_exit",
    "kill": "terminal/kill",
    "release": "terminal/release",
}


class WorkspaceAgent(AcpTestAgent):
    """See the module docstring."""

    agent_name = "workspace-test-agent"

    def __init__(self) -> None:
        super().__init__()
        self.client_caps: ClientCapabilities | None = None

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: ClientCapabilities | None = None,
        client_info: Implementation | None = None,
        **kwargs: Any,
    ) -> InitializeResponse:
        self.client_caps = client_capabilities
        return await super().initialize(
            protocol_version, client_capabilities, client_info, **kwargs
        )

    async def prompt(self, session_id: str, prompt: list[PromptBlock], **kwargs: Any) -> Any:
        steps = json.loads(prompt_text(prompt))
        results: list[dict[str, Any]] = []
        terminal: str | None = None
        for method, params in steps:
            try:
                result = await self.step(session_id, method, dict(params), terminal)
            except RequestError as exc:
                results.append({"error": {"code": exc.code, "message": str(exc)}})
                continue
            if method == "create":
                terminal = result["terminalId"]
            results.append({"ok": result})
        await self.say(session_id, json.dumps(results))
        return await super().prompt(session_id, prompt, **kwargs)

    async def step(
        self, session_id: str, method: str, params: dict[str, Any], terminal: str | None
    ) -> Any:
        if method == "caps":
            caps = self.client_caps
            return caps.model_dump(by_alias=True, exclude_none=True) if caps else None
        if method == "create" and isinstance(params.get("env"), dict):
            params["env"] = [{"name": k, "value": v} for k, v in params["env"].items()]
        if method in ("output", "wait", "kill", "release"):
            params.setdefault("terminalId", terminal)
        params["sessionId"] = session_id
        return await self._conn.connection.send_request(METHODS[method], params)


if __name__ == "__main__":
    asyncio.run(serve_stdio(WorkspaceAgent()))
