"""The ``a2a`` provider drives an A2A agent written with the SDK alone (``sdk_agent.py``, no
dsh code in it): streaming with progress, a cancel, a failed task, the other ways a task
ends, polling where the card does not stream, and the start failures that name the URL."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import ListTasksRequest, TaskState
from pydantic import ValidationError

from dsh.core import AbortSignal
from dsh.subagent import StartFailed, SubagentUsage
from dsh.subagent.kit import DEFAULT_MAX_DEPTH
from dsh.subagent_a2a import A2AProviderConfig
from dsh.testing.fixtures import progress_and_result

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]


async def remote_states(url: str) -> list[str]:
    """The states of the agent's tasks, asked with the SDK's client."""
    async with httpx.AsyncClient(timeout=10) as http:
        card = await A2ACardResolver(http, url).get_agent_card()
        client = ClientFactory(ClientConfig(httpx_client=http)).create(card)
        listed = await client.list_tasks(ListTasksRequest())
    return [TaskState.Name(task.status.state) for task in listed.tasks]


async def test_streaming_answer_with_progress(rig: Any, sdk_agent: Any) -> None:
    name = rig.register(sdk_agent.url)
    items, result = await progress_and_result(await rig.start(name, "hello there"), within=30)
    assert result.stop_reason == "completed", result
    assert result.output == "Echo: hello there"
    assert [(i.kind, i.text, i.path) for i in items] == [
        ("text", "Thinking...", ()),
        ("text", "Echo: ", ()),
        ("text", "hello there", ()),
    ]
    assert result.usage == SubagentUsage.unknown()  # the agent reports none
    assert await remote_states(sdk_agent.url) == ["TASK_STATE_COMPLETED"]


async def test_cancel_sends_cancel_task_and_settles_aborted(rig: Any, sdk_agent: Any) -> None:
    name = rig.register(sdk_agent.url, cancel_grace=5.0)
    signal = AbortSignal()
    run = await rig.start(name, "please hang", signal)
    async with run:
        with anyio.fail_after(30):
            async for item in run.progress():
                if item.text == "Thinking...":
                    break
        signal.abort("the parent changed its mind")
        with anyio.fail_after(5):
            result = await run.result
    assert result.stop_reason == "aborted", result
    assert result.diagnostic == "the parent changed its mind"
    assert result.output == "Thinking..."  # what the agent had said
    assert await remote_states(sdk_agent.url) == ["TASK_STATE_CANCELED"]


async def test_failed_rejected_and_input_required_tasks_settle_error(
    rig: Any, sdk_agent: Any
) -> None:
    name = rig.register(sdk_agent.url)
    failed = await rig.run(name, "please fail")
    assert failed.stop_reason == "error"
    assert failed.diagnostic.startswith(
        "a2a: the remote agent failed the task: the sdk agent cannot do that\nremote task "
    )
    rejected = await rig.run(name, "please reject this")
    assert rejected.stop_reason == "error"
    assert "the remote agent rejected the task: not my kind of task" in rejected.diagnostic
    asked = await rig.run(name, "needs input")
    assert asked.stop_reason == "error"
    assert (
        "the remote agent stopped in state input-required: which file do you mean?; a one-shot"
        " a2a run cannot answer it (the remote task was cancelled)" in asked.diagnostic
    )
    states = await remote_states(sdk_agent.url)
    assert sorted(states) == sorted(
        ["TASK_STATE_FAILED", "TASK_STATE_REJECTED", "TASK_STATE_CANCELED"]
    )


async def test_a_direct_reply_and_the_lineage_metadata(rig: Any, sdk_agent: Any) -> None:
    name = rig.register(sdk_agent.url)
    direct = await rig.run(name, "direct question")
    assert (direct.stop_reason, direct.output) == ("completed", "Direct: direct question")
    lineage = await rig.run(name, "lineage please")
    # no row sets a number: the child still gets the default ceiling (issue 21 item 1)
    assert lineage.output == f"depth=1.0 max={float(DEFAULT_MAX_DEPTH)}"


async def test_polling_where_the_card_does_not_stream(rig: Any, tmp_path: Path, kit: Any) -> None:
    agent = kit.start_sdk_agent(tmp_path, "--no-streaming")
    try:
        name = rig.register(agent.url, poll_interval=0.05)
        items, result = await progress_and_result(await rig.start(name, "poll me"), within=30)
        assert (result.stop_reason, result.output) == ("completed", "Echo: poll me")
        assert "".join(i.text or "" for i in items if i.kind == "text").endswith("Echo: poll me")
        signal = AbortSignal()
        run = await rig.start(name, "please hang", signal)
        async with run:
            await anyio.sleep(0.3)
            signal.abort("stop polling")
            with anyio.fail_after(5):
                result = await run.result
        assert result.stop_reason == "aborted"
        assert sorted(await remote_states(agent.url)) == [
            "TASK_STATE_CANCELED",
            "TASK_STATE_COMPLETED",
        ]
    finally:
        agent.stop()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_start_failures_name_the_card_url(
    rig: Any, sdk_agent: Any, tmp_path: Path, kit: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}/"
    with pytest.raises(StartFailed) as info:
        await rig.start(rig.register(nowhere, name="nowhere", start_timeout=5), "hi")
    assert str(info.value).startswith(
        f"nowhere start failed: cannot use the agent card at {nowhere}.well-known/agent-card.json:"
        " unreachable ("
    )

    missing = rig.register(sdk_agent.url, name="missing", card_path="/missing.json")
    with pytest.raises(StartFailed, match=r"agent card at .*/missing\.json: HTTP 404"):
        await rig.start(missing, "hi")

    with pytest.raises(StartFailed) as info:
        await rig.start(rig.register(sdk_agent.url, name="deep", depth_limit=True), "hi")
    assert "does not declare that the agent honours dsh's depth limit" in str(info.value)

    grpc_only = kit.start_sdk_agent(tmp_path, "--grpc-only")
    try:
        with pytest.raises(StartFailed) as info:
            await rig.start(rig.register(grpc_only.url, name="grpc"), "hi")
        assert "offers GRPC; this provider speaks JSONRPC, HTTP+JSON" in str(info.value)
    finally:
        grpc_only.stop()

    monkeypatch.delenv("DSH_A2A_NO_SUCH_TOKEN", raising=False)
    with pytest.raises(StartFailed) as info:
        await rig.start(
            rig.register(sdk_agent.url, name="tokenless", bearer_token_env="DSH_A2A_NO_SUCH_TOKEN"),
            "hi",
        )
    assert "the environment variable DSH_A2A_NO_SUCH_TOKEN (bearer_token_env) is not set" in str(
        info.value
    )


def test_the_config_refuses_literal_secrets() -> None:
    secret = "sk-live-0123456789abcdef"
    with pytest.raises(ValidationError) as info:
        A2AProviderConfig(url="http://127.0.0.1:1/", bearer_token_env=secret)
    assert "names an environment variable" in str(info.value)
    assert secret not in str(info.value).split("input_value=")[0]
    with pytest.raises(ValidationError, match="must not carry credentials"):
        A2AProviderConfig(url="https://user:pass@agents.example.com/")
    with pytest.raises(ValidationError, match="names an environment variable"):
        A2AProviderConfig(url="http://127.0.0.1:1/", headers_env={"X-Api-Key": "abc def"})
    with pytest.raises(ValidationError, match="extra"):
        A2AProviderConfig(url="http://127.0.0.1:1/", headers={"X-Api-Key": "abc"})  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="not both"):
        A2AProviderConfig(
            url="http://127.0.0.1:1/", bearer_token_env="T", headers_env={"authorization": "U"}
        )
