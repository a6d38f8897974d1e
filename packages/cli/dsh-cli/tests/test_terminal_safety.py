# ruff: noqa: E501  (the presets below are TOML, one row a line)
"""Honest prompts and terminal output: the approval prompt shows the whole command with
its control characters visible and takes one key; what a model or a child writes
reaches the terminal without its escape sequences; a tool denied by the preset is not
offered to the model; ``dsh acp`` sends an editor an honest title and the whole
command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import termios
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from dsh.testing.fixtures import dsh_acp_child
from dsh.testing.model_servers import ChatReply, ChatToolCall, OpenAIChatServer
from dsh.testing.model_servers._http import RecordedRequest
from dsh.testing.processes import PtyProcess, run_cli

pytestmark = pytest.mark.timeout(60)

# What the model asks to run: `touch X`, then a comment that erases the line and
# writes a harmless-looking command over it; then a second line.
TRICK = "touch X #\x1b[2K\rRun `ls -la`\necho second-line"
SHOWN = "touch X #\\x1b[2K\\rRun `ls -la`"  # how the prompt must show the first line

TRICK_PRESET = """
[agent.model]
adapter = "scripted"
[[agent.model.options.replies]]
tool_calls = [{ name = "shell", arguments = { command = "touch X #\\u001b[2K\\rRun `ls -la`\\necho second-line" } }]
[[agent.model.options.replies]]
text = "result: {tool_results}"

[[plugin]]
name = "dsh-tool-shell"
"""

# Streamed text with an OSC 52 clipboard write (split over chunks), a window title
# set with ST, and a carriage return; a child whose label carries an OSC too.
OSC_PRESET = """
[agent.model]
adapter = "scripted"
[agent.model.options]
mode = "sequence"
[[agent.model.options.replies]]
tool_calls = [{ name = "subagent", arguments = { description = "evil\\u001b]0;pwned-title\\u001b\\\\ child", prompt = "go" } }]
[[agent.model.options.replies]]
text = "safe-start \\u001b]52;c;Y2xpcGJvYXJk\\u0007 middle \\u001b[31mred\\u001b[0m over\\rwritten \\u009b2J end"
chunks = 7

[[plugin]]
name = "dsh-subagent-spawn-in-process"

[[plugin]]
name = "dsh-tool-subagent"
config = { provider = "spawn", tool_name = "subagent", agent_options = { model = { adapter = "scripted", options = { replies = [ { text = "child \\u001b]52;c;Y2hpbGQ=\\u0007 says hi" } ] } } } }
"""


def write(tmp_path: Path, text: str, name: str = "p.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def clean_env(**extra: str) -> dict[str, str]:
    drop = ("OPENAI_", "DEEPSEEK_", "ANTHROPIC_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.pop("NO_COLOR", None)
    env["TERM"] = "xterm-256color"
    env["COLUMNS"] = "120"
    env.update(extra)
    return env


_started: list[PtyRun] = []


@pytest.fixture(autouse=True)
def _no_run_left_behind() -> Iterator[None]:
    """A test that failed half-way still ends its ``dsh`` process."""
    yield
    while _started:
        _started.pop().close()


class PtyRun(PtyProcess):
    """``python -m dsh.cli ARGS`` on a pseudo-terminal (stdin, stdout and stderr)."""

    def __init__(self, *args: str, cwd: Path) -> None:
        super().__init__([sys.executable, "-m", "dsh.cli", *args], cwd=cwd, env=clean_env())
        _started.append(self)


# -- the approval prompt ---------------------------------------------------------------------


@pytest.mark.parametrize(("key", "created"), [(b"n", False), (b"y", True)])
def test_the_prompt_shows_the_whole_command_and_takes_one_key(
    tmp_path: Path, key: bytes, created: bool
) -> None:
    preset = write(tmp_path, TRICK_PRESET)
    run = PtyRun("run", "--preset", str(preset), "go", cwd=tmp_path)
    run.wait_for("allow?")
    shown = run.plain
    # The raw trick never reaches the terminal; the prompt shows it for what it is,
    # every line of the command, indented.
    assert b"#\x1b[2K\rRun" not in run.raw
    assert f"    {SHOWN}\r\n    echo second-line\r\n" in shown
    assert f"wants to run shell: Run `{SHOWN}` (+1 more line)" in shown
    run.send(key)  # one key, no Enter
    run.wait_for("result:", timeout=20)
    status = run.finish()
    plain = run.plain
    assert status == (0 if created else 3), plain  # 3: finished with a refused call
    assert (tmp_path / "X").exists() is created
    answer = plain[plain.index("result:") :]
    if created:
        assert "second-line" in answer
        assert "allow? [y]es / [a]lways for this tool / [n]o (default): yes" in plain
    else:
        assert 'the user refused "shell"' in answer
        assert "allow? [y]es / [a]lways for this tool / [n]o (default): no" in plain
    assert "Traceback" not in plain


def test_keys_typed_before_the_prompt_do_not_answer_it(tmp_path: Path) -> None:
    slow = TRICK_PRESET.replace(
        "[[agent.model.options.replies]]\ntool_calls",
        "[[agent.model.options.replies]]\ndelay = 1.5\ntool_calls",
        1,
    )
    preset = write(tmp_path, slow)
    run = PtyRun("run", "--preset", str(preset), "go", cwd=tmp_path)
    run.wait_for("lead")
    run.send(b"y")  # typed while the model was still thinking
    run.wait_for("allow?")
    time.sleep(0.5)
    assert "(default): yes" not in run.plain  # still waiting for an answer
    run.send(b"n")
    run.wait_for("result:")
    assert run.finish() == 3  # finished with failures: the refused call
    assert not (tmp_path / "X").exists()


def test_ctrl_c_at_the_prompt_puts_the_terminal_back(tmp_path: Path) -> None:
    preset = write(tmp_path, TRICK_PRESET)
    run = PtyRun("run", "--preset", str(preset), "go", cwd=tmp_path)
    run.wait_for("allow?")
    time.sleep(0.2)
    modes = termios.tcgetattr(run.fd)[3]  # the pseudo-terminal's local modes
    assert not modes & termios.ICANON  # one key at a time...
    assert not modes & termios.ECHO  # ...not echoed
    run.send(b"\x03")
    status = run.finish(keep_open=True)
    try:
        modes = termios.tcgetattr(run.fd)[3]
    finally:
        os.close(run.fd)
    assert status == 130, run.plain
    assert modes & termios.ICANON
    assert modes & termios.ECHO
    assert "dsh: interrupted" in run.plain
    assert "Traceback" not in run.plain
    assert not (tmp_path / "X").exists()


# -- model and child text on the terminal ----------------------------------------------------


def _no_sequences_of_theirs(raw: bytes) -> None:
    assert b"\x1b]" not in raw  # no OSC at all (rich itself writes none here)
    assert "\x9b" not in raw.decode("utf-8", "replace")  # no 8-bit CSI
    assert b"\x1b[31m" not in raw  # the model's colour
    assert b"\x07" not in raw


def test_streamed_text_reaches_a_terminal_without_escape_sequences(tmp_path: Path) -> None:
    preset = write(tmp_path, OSC_PRESET)
    run = PtyRun("run", "--yes", "--preset", str(preset), "go", cwd=tmp_path)
    run.wait_for("usage:")
    status = run.finish()
    _no_sequences_of_theirs(run.raw)
    plain = run.plain
    assert status == 0, plain
    assert "safe-start  middle red over\\rwritten  end" in plain  # the text itself stays
    assert "evil child" in plain  # the child's label, its OSC gone


def test_piped_output_has_no_escape_sequences_and_json_keeps_the_text(tmp_path: Path) -> None:
    preset = write(tmp_path, OSC_PRESET)
    command = [sys.executable, "-m", "dsh.cli", "run", "--yes", "--preset", str(preset), "go"]
    done = subprocess.run(
        command, capture_output=True, timeout=50, stdin=subprocess.DEVNULL, env=clean_env()
    )
    assert done.returncode == 0, done.stderr
    _no_sequences_of_theirs(done.stdout + done.stderr)
    assert done.stdout.decode() == "safe-start  middle red over\\rwritten  end\n"
    assert '+ [spawn] "evil child" started' in done.stderr.decode()
    as_json = subprocess.run(
        [*command, "--json"],
        capture_output=True,
        timeout=50,
        stdin=subprocess.DEVNULL,
        env=clean_env(),
    )
    events = [json.loads(line) for line in as_json.stdout.decode().splitlines()]
    answer = next(e for e in events if e["type"] == "answer")["text"]
    assert "\x1b]52;c;Y2xpcGJvYXJk\x07" in answer  # JSON is escaped already: left whole


# -- a denied tool is not offered ------------------------------------------------------------


def _tools(request: RecordedRequest) -> set[str]:
    body = request.json if isinstance(request.json, Mapping) else {}
    return {t["function"]["name"] for t in body.get("tools") or []}


def _script(request: RecordedRequest) -> ChatReply:
    body = request.json if isinstance(request.json, Mapping) else {}
    messages: list[Any] = body.get("messages") or []
    if not any(m.get("role") == "tool" for m in messages):
        return ChatReply(tool_calls=[ChatToolCall("shell", {"command": "touch made-by-shell"})])
    return ChatReply(text="tool said: " + str(messages[-1].get("content")))


def test_a_denied_tool_is_not_in_the_schemas_sent_to_the_model(tmp_path: Path) -> None:
    preset = write(
        tmp_path, 'extends = "standard"\n[permissions.tools]\nshell = "deny"\n', "deny.toml"
    )
    with OpenAIChatServer(default=_script, api_key="k") as srv:
        done = run_cli(
            "dsh.cli",
            ["run", "--preset", str(preset), "go"],
            cwd=tmp_path,
            env=clean_env(OPENAI_BASE_URL=srv.api_base, OPENAI_API_KEY="k"),
            timeout=50,
        )
        requests = srv.requests
    assert done.returncode == 3, done.stderr  # finished with failures: a refused call
    assert requests
    for request in requests:
        offered = _tools(request)
        assert "shell" not in offered
        assert {"read_file", "subagent"} <= offered
    # The model guessed the name anyway: refused, as before.
    assert "denied by the permission policy" in done.stdout
    assert not (tmp_path / "made-by-shell").exists()


# -- dsh acp: what an editor is asked ---------------------------------------------------------

ACP_PRESET = TRICK_PRESET  # the same command, asked of an editor


@pytest.mark.anyio
async def test_acp_permission_request_has_an_honest_title_and_the_whole_command(
    tmp_path: Path,
) -> None:
    import anyio
    from acp import PROTOCOL_VERSION, Client
    from acp.schema import (
        DeniedOutcome,
        PermissionOption,
        RequestPermissionResponse,
        TextContentBlock,
        ToolCallUpdate,
    )

    asked: list[ToolCallUpdate] = []

    class Editor(Client):
        async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
            return None

        async def request_permission(
            self,
            session_id: str,
            tool_call: ToolCallUpdate,
            options: list[PermissionOption],
            **kw: Any,
        ) -> RequestPermissionResponse:
            asked.append(tool_call)
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))

    preset = write(tmp_path, ACP_PRESET)
    async with dsh_acp_child(Editor(), "--preset", str(preset), cwd=tmp_path) as (conn, _):
        with anyio.fail_after(30):
            await conn.initialize(protocol_version=PROTOCOL_VERSION)
            session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
            await conn.prompt(
                session_id=session.session_id, prompt=[TextContentBlock(type="text", text="go")]
            )
    (request,) = asked
    assert request.title == f"Run `{SHOWN}` (+1 more line)"
    assert request.raw_input == {"command": TRICK, "timeout": None}
    assert not (tmp_path / "X").exists()
