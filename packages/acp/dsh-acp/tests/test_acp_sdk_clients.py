"""The official ACP SDK clients drive a real ``dsh acp`` (the model scripted):

* the Python SDK (``agent-client-protocol``) through ``acp_sdk_client.py``, run by this
  interpreter: 0.12 in the workspace, 1.0 under ``tools/check_acp_1.sh`` (which sets
  ``DSH_EXPECT_ACP_VERSION`` so the test checks it really ran that version);
* the TypeScript SDK (``@agentclientprotocol/sdk``, pinned by ``tools/install-acp-sdk.sh``)
  through ``acp_sdk_client.mjs`` on Node. It is found through env ``DSH_ACP_SDK_DIR``, else
  ``<repo>/.tools/acp-sdk/node_modules/@agentclientprotocol/sdk``; under ``CI=true`` a
  missing SDK or ``node`` fails the test, locally it is skipped with the install command.

Both clients run the same scenario and are held to the same checks: initialize,
session/new, a streamed answer, a tool call, ``session/cancel`` of a running turn (and,
with the TypeScript SDK, ``$/cancel_request`` from an aborted request's signal), then a
turn after the cancels; every update on the wire reaches the client through the SDK's own
parsing (its models, its zod schemas), and ``dsh acp`` exits 0 at the end of its input.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dsh.testing._acp_fixtures import ECHO_TOOL_RULE, hello_preset
from dsh.testing.fixtures import keyed_rule, plugin_rows

pytestmark = pytest.mark.timeout(180)

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[3]
DEFAULT_SDK = REPO / ".tools" / "acp-sdk" / "node_modules" / "@agentclientprotocol" / "sdk"

PRESET = hello_preset(
    ECHO_TOOL_RULE,
    keyed_rule(
        "hang", {"tool_calls": [{"name": "echo", "arguments": {"text": "wait"}}]}, {"hang": True}
    ),
    chunks=4,
    plugins=plugin_rows("dsh-testing-example"),
)


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def _missing(message: str) -> None:
    if _in_ci():
        pytest.fail(message)
    pytest.skip(message)


def _dsh_acp(tmp_path: Path) -> list[str]:
    preset = tmp_path / "agent.toml"
    preset.write_text(PRESET, encoding="utf-8")
    return [sys.executable, "-m", "dsh.cli", "acp", "--preset", str(preset)]


def _run(client: list[str], tmp_path: Path) -> dict[str, Any]:
    done = subprocess.run(
        client, cwd=tmp_path, capture_output=True, text=True, timeout=150, check=False
    )
    assert done.returncode == 0, f"{client[:2]} exited {done.returncode}:\n{done.stderr}"
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _text(updates: list[dict[str, Any]]) -> str:
    return "".join(
        u["content"]["text"] for u in updates if u["sessionUpdate"] == "agent_message_chunk"
    )


def _check(result: dict[str, Any], cancels: list[str]) -> None:
    """The scenario's outcome, the same for every SDK client."""
    init = result["initialize"]
    assert init["protocolVersion"] == 1
    assert init["agentInfo"]["name"] == "dsh"
    assert result["session"]["sessionId"]
    turns = {(t["prompt"], t["cancel"]): t for t in result["turns"]}
    expected: list[tuple[str, str | None]] = [("hi there", None), ("please use the tool", None)]
    expected += [("please hang", cancel) for cancel in cancels] + [("still there?", None)]
    assert [(t["prompt"], t["cancel"]) for t in result["turns"]] == expected

    for turn in result["turns"]:
        # the SDK parsed every update dsh sent: none was dropped or reshaped into another kind
        raw = [message["update"] for message in turn["raw"]]
        assert [u["sessionUpdate"] for u in turn["updates"]] == [u["sessionUpdate"] for u in raw]
        assert all(m["sessionId"] == result["session"]["sessionId"] for m in turn["raw"])

    streamed = turns[("hi there", None)]
    assert streamed["stopReason"] == "end_turn"
    chunks = [u for u in streamed["updates"] if u["sessionUpdate"] == "agent_message_chunk"]
    assert len(chunks) == 4, streamed["updates"]  # streamed in pieces, not in one update
    assert len({c["messageId"] for c in chunks}) == 1
    assert _text(streamed["updates"]) == "Hello from dsh: hi there"

    tool = turns[("please use the tool", None)]
    assert tool["stopReason"] == "end_turn"
    kinds = [u["sessionUpdate"] for u in tool["updates"]]
    assert kinds[:2] == ["tool_call", "tool_call_update"], kinds
    start, end = tool["updates"][:2]
    assert start["toolCallId"] == end["toolCallId"]
    assert start["status"] == "pending"
    assert start["rawInput"] == {"text": "ping"}
    assert end["status"] == "completed"
    assert end["content"][0]["content"]["text"] == "echo: ping"
    assert _text(tool["updates"]) == "The tool said: echo: ping"

    for cancel in cancels:
        cancelled = turns[("please hang", cancel)]
        assert cancelled["stopReason"] == "cancelled", cancel
        assert [u["sessionUpdate"] for u in cancelled["updates"]] == [
            "tool_call",
            "tool_call_update",
        ]

    after = turns[("still there?", None)]
    assert after["stopReason"] == "end_turn"
    assert _text(after["updates"]) == "Hello from dsh: still there?"
    assert result["permissions"] == []  # echo needs no permission in this preset
    assert result["exitCode"] == 0


def test_the_python_sdk_client_drives_dsh_acp(tmp_path: Path) -> None:
    client = [sys.executable, str(HERE / "acp_sdk_client.py"), str(tmp_path), "--"]
    result = _run(client + _dsh_acp(tmp_path), tmp_path)
    expected = os.environ.get("DSH_EXPECT_ACP_VERSION")
    if expected:  # tools/check_acp_1.sh: the run must be the version it installed
        assert result["sdk"] == f"agent-client-protocol@{expected}"
    _check(result, ["session/cancel"])


def test_the_typescript_sdk_client_drives_dsh_acp(tmp_path: Path) -> None:
    node = shutil.which("node")
    if node is None:
        _missing("node not found on PATH; install Node.js >= 18, then run tools/install-acp-sdk.sh")
    configured = os.environ.get("DSH_ACP_SDK_DIR")
    sdk = Path(configured) if configured else DEFAULT_SDK
    if not (sdk / "package.json").is_file():
        _missing(
            f"@agentclientprotocol/sdk not found at {sdk}"
            f"{' (from DSH_ACP_SDK_DIR)' if configured else ''}; run tools/install-acp-sdk.sh"
            " (npm installs the pinned version) or set DSH_ACP_SDK_DIR"
        )
    assert node is not None
    client = [node, str(HERE / "acp_sdk_client.mjs"), str(sdk), str(tmp_path), "--"]
    result = _run(client + _dsh_acp(tmp_path), tmp_path)
    assert result["sdk"].startswith("@agentclientprotocol/sdk@")
    _check(result, ["session/cancel", "$/cancel_request"])
