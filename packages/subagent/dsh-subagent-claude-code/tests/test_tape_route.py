"""The claude-code provider routes the CLI's ``ANTHROPIC_BASE_URL`` through the run's
tape (``DSH_TAPE_PROXY``). (The real CLI through a recording and a replaying tape:
tests-integration/test_tapes.py; this package's tests run from committed tapes:
test_claude_code_taped.py.)"""

from __future__ import annotations

from dsh.subagent.kit import TAPE_PROXY_VARIABLE, taped_url
from dsh.subagent_claude_code._command import ANTHROPIC_API, through_tape

PROXY = "http://127.0.0.1:4000/token"


def test_no_tape_leaves_the_environment_alone() -> None:
    assert through_tape({"ANTHROPIC_BASE_URL": "http://x"}) == {"ANTHROPIC_BASE_URL": "http://x"}
    assert through_tape({}) == {}


def test_the_base_url_or_the_public_api_goes_through_the_tape() -> None:
    env = through_tape({TAPE_PROXY_VARIABLE: PROXY, "ANTHROPIC_BASE_URL": "http://fake:1"})
    assert env["ANTHROPIC_BASE_URL"] == taped_url("http://fake:1", "claude-code", env)
    assert env["ANTHROPIC_BASE_URL"].startswith(PROXY + "/x/claude-code/")
    env = through_tape({TAPE_PROXY_VARIABLE: PROXY})
    assert env["ANTHROPIC_BASE_URL"] == taped_url(ANTHROPIC_API, "claude-code", env)
