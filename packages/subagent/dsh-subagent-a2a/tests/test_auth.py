"""The provider against a ``dsh a2a`` that requires a bearer token: the token comes from the
environment variable named in the config, reaches the server on every request, and never
appears in a diagnostic, in progress, or in the server's logs."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from dsh.subagent import StartFailed
from dsh.testing.fixtures import progress_and_result

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

TOKEN = "tok-" + uuid.uuid4().hex
WRONG = "tok-" + uuid.uuid4().hex


async def test_the_token_travels_but_never_shows(
    rig: Any, tmp_path: Path, keyed_preset: Path, kit: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = kit.start_dsh_a2a(
        tmp_path,
        keyed_preset,
        "--token-env",
        "SERVED_TOKEN",
        "--log-level",
        "debug",
        env={"SERVED_TOKEN": TOKEN},
    )
    try:
        monkeypatch.setenv("CALLER_TOKEN", TOKEN)
        monkeypatch.setenv("CALLER_WRONG_TOKEN", WRONG)
        good = rig.register(server.url, name="good", bearer_token_env="CALLER_TOKEN")
        items, result = await progress_and_result(await rig.start(good, "say hello"), within=30)
        assert (result.stop_reason, result.output) == ("completed", "Done: say hello")
        failed = await rig.run(good, "please fail")
        assert failed.stop_reason == "error"

        wrong = rig.register(server.url, name="wrong", bearer_token_env="CALLER_WRONG_TOKEN")
        with pytest.raises(StartFailed) as info:
            await rig.start(wrong, "say hello")
        assert "HTTP 401: the agent refused the credentials" in str(info.value)

        missing = rig.register(server.url, name="anonymous")
        with pytest.raises(StartFailed, match="HTTP 401"):
            await rig.start(missing, "say hello")
    finally:
        assert server.stop() == 143
    seen = [repr(items), repr(result), repr(failed), str(info.value), server.stderr]
    for text in seen:
        assert TOKEN not in text
        assert WRONG not in text
    assert "DEBUG" in server.stderr
