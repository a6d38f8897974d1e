"""Auth: with ``--token-env`` every request needs ``Authorization: Bearer <token>``: none or
a wrong one is answered 401 and creates no task; the token never appears in the server's
logs (stderr at debug level). Binding a non-loopback address without a token is refused."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, A2AClientError, ClientConfig, ClientFactory
from a2a.types import ListTasksRequest, TaskState

from dsh.testing.processes import run_cli

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

TOKEN = "dsh-test-token-" + uuid.uuid4().hex
VARIABLE = "DSH_A2A_TEST_TOKEN"


async def test_requests_without_the_token_get_401_and_create_no_task(
    tmp_path: Path, keyed_preset: Path, kit: Any
) -> None:
    server = kit.start_server(
        tmp_path,
        keyed_preset,
        "--token-env",
        VARIABLE,
        "--log-level",
        "debug",
        env={VARIABLE: TOKEN},
    )
    try:
        card_url = server.url + ".well-known/agent-card.json"
        headers_tried = [
            {},
            {"Authorization": "Bearer wrong-" + TOKEN[::-1]},
            {"Authorization": TOKEN},  # no scheme
            {"Authorization": f"Basic {TOKEN}"},
        ]
        async with httpx.AsyncClient(timeout=10) as http:
            for headers in headers_tried:
                response = await http.get(card_url, headers=headers)
                assert response.status_code == 401, (headers, response.text)
                assert response.headers["www-authenticate"].startswith("Bearer")
                response = await http.post(
                    server.url,
                    json=kit.send_request("please do something"),
                    headers={**headers, "A2A-Version": "1.0"},
                )
                assert response.status_code == 401, (headers, response.text)
                assert TOKEN not in response.text
            # the SDK's client without credentials fails the same way
            with pytest.raises(A2AClientError, match="401"):
                await A2ACardResolver(http, server.url).get_agent_card()

        good = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(headers=good, timeout=httpx.Timeout(30, read=None)) as http:
            card = await A2ACardResolver(http, server.url).get_agent_card()
            assert "bearer" in card.security_schemes
            assert card.security_schemes["bearer"].http_auth_security_scheme.scheme == "bearer"
            client = ClientFactory(ClientConfig(httpx_client=http)).create(card)
            listed = await client.list_tasks(ListTasksRequest())
            assert list(listed.tasks) == []  # none of the refused requests made a task
            assert await kit.final_state(client, "say hi") == TaskState.TASK_STATE_COMPLETED
            listed = await client.list_tasks(ListTasksRequest())
            assert len(listed.tasks) == 1
    finally:
        assert server.stop() == 143
    log = server.stderr
    assert "auth: bearer token from $DSH_A2A_TEST_TOKEN" in log
    assert "DEBUG" in log  # the server did log at debug level...
    assert TOKEN not in log  # ...and never the token
    assert TOKEN[::-1] not in log


def dsh_a2a(tmp_path: Path, preset: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    import os

    return run_cli(
        "dsh.a2a",
        ["--preset", str(preset), *args],
        cwd=tmp_path,
        env={**os.environ, **(env or {})},
        timeout=60,
    )


def test_a_non_loopback_bind_needs_a_token(tmp_path: Path, keyed_preset: Path) -> None:
    done = dsh_a2a(tmp_path, keyed_preset, "--host", "0.0.0.0", "--port", "0")
    assert done.returncode == 2
    assert "refusing to bind 0.0.0.0 without authentication: pass --token-env" in done.stderr
    assert "serving" not in done.stderr

    done = dsh_a2a(tmp_path, keyed_preset, "--host", "0.0.0.0", "--token-env", "DSH_A2A_UNSET_X")
    assert done.returncode == 2
    assert "DSH_A2A_UNSET_X: the environment variable is not set or empty" in done.stderr


def test_configuration_problems_exit_2(tmp_path: Path, keyed_preset: Path) -> None:
    done = dsh_a2a(tmp_path, keyed_preset, "--port", "0", "--task-store", "mysql://db/x")
    assert done.returncode == 2
    assert "--task-store: unsupported database 'mysql'" in done.stderr

    secret_url = "postgresql://dsh:hunter2@127.0.0.1:1/tasks"
    done = dsh_a2a(tmp_path, keyed_preset, "--port", "0", "--task-store", secret_url)
    assert done.returncode == 2
    # a TaskStoreError is a DshError: its text shows no credential of a URL at all
    assert "postgresql://***@127.0.0.1:1/tasks" in done.stderr
    assert "hunter2" not in done.stderr

    modelless = tmp_path / "modelless.toml"
    modelless.write_text('[agent]\npersona = "nobody"\n')
    done = dsh_a2a(tmp_path, modelless, "--port", "0")
    assert done.returncode == 2
    assert "no model is configured" in done.stderr

    done = dsh_a2a(tmp_path, tmp_path / "missing.toml", "--port", "0")
    assert done.returncode == 2
    assert "missing.toml" in done.stderr
