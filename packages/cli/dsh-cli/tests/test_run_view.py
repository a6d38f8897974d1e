# ruff: noqa: E501  (the presets below are TOML, one row a line)
"""``dsh run`` shows the run: a live tree on a terminal (under a pseudo-terminal here),
JSON lines with ``--json``, the answer alone on stdout otherwise; Ctrl-C, background
jobs and permission prompts."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from dsh.testing.processes import ANSI, PtyProcess, run_cli

pytestmark = pytest.mark.timeout(60)

# The lead delegates once; the spawn child takes its time (so a terminal sees the tree
# change) and itself delegates to a grandchild. Child and grandchild share one scripted
# model, whose replies go in order: the child's first, the grandchild's, the child's last.
TREE_PRESET = """
[agent.model]
adapter = "scripted"
[[agent.model.options.replies]]
text = "Delegating."
tool_calls = [{ name = "subagent", arguments = { description = "slow research", prompt = "research slowly" } }]
[[agent.model.options.replies]]
text = "All done: {tool_results}"
chunks = 3

[[plugin]]
name = "dsh-subagent-spawn-in-process"

[[plugin]]
name = "dsh-tool-subagent"
config = { provider = "spawn", tool_name = "subagent", max_depth = 3, agent_options = { model = { adapter = "scripted", options = { mode = "sequence", replies = [
  { text = "thinking hard", delay = 0.8, chunks = 2, tool_calls = [{ name = "subagent", arguments = { description = "inner check", prompt = "check" } }] },
  { text = "grandchild says ok", delay = 0.4 },
  { text = "child found {tool_results}", delay = 0.4 },
] } } } }
"""


def write(tmp_path: Path, text: str, name: str = "p.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def clean_env() -> dict[str, str]:
    drop = ("OPENAI_", "DEEPSEEK_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.pop("NO_COLOR", None)
    env["TERM"] = "xterm-256color"
    env["COLUMNS"] = "120"
    return env


class PtyRun(PtyProcess):
    """``python -m dsh.cli ARGS`` on a pseudo-terminal (stdin, stdout and stderr)."""

    def __init__(self, *args: str, cwd: Path) -> None:
        super().__init__([sys.executable, "-m", "dsh.cli", *args], cwd=cwd, env=clean_env())


def frames_with(text: str, label: str) -> list[str]:
    """The lines of the live display (escape codes gone) that show ``label``."""
    lines = re.split(r"\r\n|\r|\n|\x1b\[2K|\x1b\[1A", text)
    return [ANSI.sub("", line) for line in lines if label in ANSI.sub("", line)]


def test_on_a_terminal_the_tree_updates_in_place(tmp_path: Path) -> None:
    preset = write(tmp_path, TREE_PRESET)
    run = PtyRun("run", "--preset", str(preset), "go", cwd=tmp_path)
    status = run.finish()
    out = run.text
    assert status == 0, out
    assert "\x1b[2K" in out  # lines redrawn in place (rich Live)
    child = frames_with(out, "slow research")
    # Several frames of the delegation: running (with elapsed time growing), then done.
    running = [f for f in child if "running" in f]
    done = [f for f in child if "completed" in f]
    assert len(running) >= 3, child
    assert done, child
    assert child.index(running[0]) < child.index(done[0])
    elapsed = {re.search(r"running\s+(\d+ ms|[\d.]+ s)", f).group(1) for f in running}  # type: ignore[union-attr]
    assert len(elapsed) >= 2, running  # the elapsed time moved between frames
    # The grandchild shows up nested under the child, and finishes.
    inner = frames_with(out, "inner check")
    assert any("running" in f for f in inner), inner
    assert any("completed" in f for f in inner), inner
    assert any("│" in f or "└──" in f for f in inner)
    # The lead's text streamed, and the total usage came at the end.
    plain = ANSI.sub("", out)
    assert "All done: child found grandchild says ok" in plain
    assert "usage: lead" in plain
    assert "in 2 runs" in plain
    assert "Traceback" not in plain


def test_json_lines_carry_every_start_and_end(tmp_path: Path) -> None:
    preset = write(tmp_path, TREE_PRESET)
    done = run_cli(
        "dsh.cli", ["run", "--json", "--preset", str(preset), "go"], env=clean_env(), timeout=50
    )
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]  # every line parses
    kinds = [e["type"] for e in events]
    starts = [e for e in events if e["type"] == "subagent/start"]
    ends = [e for e in events if e["type"] == "subagent/end"]
    assert len(starts) == 2
    assert sorted(e["run_id"] for e in starts) == sorted(e["run_id"] for e in ends)
    assert {e["label"] for e in starts} == {"slow research", "inner check"}
    child = next(e for e in starts if e["label"] == "slow research")
    inner = next(e for e in starts if e["label"] == "inner check")
    assert inner["parent_agent"] == child["run_id"]  # nested
    assert inner["depth"] == 2
    assert all(e["stop_reason"] == "completed" for e in ends)
    assert all("input_tokens" in e["usage"] for e in ends)
    progress = [e for e in events if e["type"] == "subagent/progress"]
    assert {p["item"]["kind"] for p in progress} >= {"text", "tool_call", "tool_update", "usage"}
    assert "lead/text" in kinds
    assert "lead/tool_call" in kinds
    assert kinds[-2:] == ["answer", "usage"]
    answer = events[-2]
    assert answer["text"] == "All done: child found grandchild says ok"
    assert answer["stop_reason"] == "completed"
    usage = events[-1]
    assert set(usage["subagents"]["runs"]) == {e["run_id"] for e in starts}
    assert usage["total"]["output_tokens"] == (
        usage["lead"]["output_tokens"] + usage["subagents"]["total"]["output_tokens"]
    )
    assert usage["incomplete"] is False
    assert done.stderr == ""


def test_json_into_a_reader_that_goes_away_stops_quietly(tmp_path: Path) -> None:
    # dsh run --json ... | head -1: the first write after the reader left cancels the
    # run; no traceback, exit status 141 (128 + SIGPIPE), as a shell pipeline expects.
    preset = write(tmp_path, TREE_PRESET)
    proc = subprocess.Popen(
        [sys.executable, "-m", "dsh.cli", "run", "--json", "--preset", str(preset), "go"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=clean_env(),
    )
    try:
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())
        assert first["type"] == "lead/text"
        proc.stdout.close()  # the reader goes away; the child is still thinking (0.8 s)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 141, err.decode()
    assert b"Traceback" not in err
    assert b"Broken pipe" not in err


def test_without_a_terminal_stdout_holds_the_answer_alone(tmp_path: Path) -> None:
    preset = write(tmp_path, TREE_PRESET)
    done = run_cli("dsh.cli", ["run", "--preset", str(preset), "go"], env=clean_env(), timeout=50)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "All done: child found grandchild says ok\n"
    err = done.stderr
    assert '+ [spawn] "slow research" started' in err
    assert '  + [spawn] "inner check" started' in err  # nested: indented
    assert '- [spawn] "slow research" completed' in err
    assert err.strip().splitlines()[-1].startswith("usage: lead")
    assert "\x1b[" not in done.stdout + err


# -- Ctrl-C ----------------------------------------------------------------------------------

HANG_PRESET = """
[agent.model]
adapter = "scripted"
[[agent.model.options.replies]]
tool_calls = [{ name = "subagent", arguments = { description = "stuck child", prompt = "wait" } }]

[[plugin]]
name = "dsh-tool-shell"

[[plugin]]
name = "dsh-subagent-spawn-in-process"

[[plugin]]
name = "dsh-tool-subagent"
config = { provider = "spawn", tool_name = "subagent", agent_options = { model = { adapter = "scripted", options = { replies = [
  { tool_calls = [{ name = "shell", arguments = { command = "sleep 41.5" } }] },
] } } } }
"""


def sleepers() -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "41.5" in cmdline and "sleep" in " ".join(cmdline):
            found.append(proc)
    return found


def test_ctrl_c_on_a_terminal_says_interrupted_and_disposes_children(tmp_path: Path) -> None:
    preset = write(tmp_path, HANG_PRESET)
    run = PtyRun("run", "--yes", "--preset", str(preset), "go", cwd=tmp_path)
    run.wait_for("sleep 41.5")
    deadline = time.monotonic() + 10
    while not sleepers() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sleepers(), "the child's shell command never started"
    run.send(b"\x03")  # Ctrl-C, through the terminal's line discipline
    status = run.finish()
    plain = ANSI.sub("", run.text)
    assert status == 130, plain
    assert "dsh: interrupted" in plain
    assert "Traceback" not in plain
    deadline = time.monotonic() + 5
    while sleepers() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not sleepers()  # the child's command went with it


def test_ctrl_c_leaves_a_last_frame_without_running_children_and_the_usage(
    tmp_path: Path,
) -> None:
    preset = write(tmp_path, HANG_PRESET)
    run = PtyRun("run", "--yes", "--preset", str(preset), "go", cwd=tmp_path)
    run.wait_for("sleep 41.5")
    run.send(b"\x03")
    status = run.finish()
    assert status == 130, run.text
    after = run.text[run.text.index("^C") :] if "^C" in run.text else run.text
    child = frames_with(after, "stuck child")
    assert child, run.text
    # The last frame: the child stopped with the run, nothing left "running".
    assert "interrupted" in child[-1], child
    assert "running" not in child[-1], child
    assert "● " not in child[-1], child
    assert any("interrupted" in f for f in frames_with(after, "lead")), after
    plain = ANSI.sub("", after)
    assert "usage: lead" in plain  # the usage comes after Ctrl-C too
    assert plain.index("usage: lead") < plain.index("dsh: interrupted")


FAST_PRESET = """
[agent.model]
adapter = "scripted"
[[agent.model.options.replies]]
text = "quick answer"
"""


def test_a_run_shorter_than_one_frame_never_shows_a_stale_frame(tmp_path: Path) -> None:
    preset = write(tmp_path, FAST_PRESET)
    run = PtyRun("run", "--preset", str(preset), "go", cwd=tmp_path)
    status = run.finish()
    plain = ANSI.sub("", run.text)
    assert status == 0, plain
    assert "quick answer" in plain
    # Every frame drawn after the answer is current: no "starting 0 ms" (the frame of
    # before the run began), and the last one says how it ended.
    assert "starting" not in plain, run.text
    lead = frames_with(run.text, "lead  ")
    assert "completed" in lead[-1], lead


def test_sigint_without_a_terminal(tmp_path: Path) -> None:
    preset = write(tmp_path, HANG_PRESET)
    proc = subprocess.Popen(
        [sys.executable, "-m", "dsh.cli", "run", "--yes", "--preset", str(preset), "go"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=clean_env(),
    )
    try:
        deadline = time.monotonic() + 20
        while not sleepers() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sleepers()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert err.strip().endswith("dsh: interrupted")
    assert "Traceback" not in err
    assert out == ""
    deadline = time.monotonic() + 5
    while sleepers() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not sleepers()


# -- background jobs ------------------------------------------------------------------------

JOB_PRESET = """
[agent.model]
adapter = "scripted"
[agent.model.options]
mode = "sequence"
[[agent.model.options.replies]]
tool_calls = [{ name = "subagent", arguments = { description = "background work", prompt = "work", run_in_background = true } }]
[[agent.model.options.replies]]
text = "started it"
[[agent.model.options.replies]]
text = "the job is back: {prompt}"

[[plugin]]
name = "dsh-subagent-spawn-in-process"

[[plugin]]
name = "dsh-tool-subagent"
config = { provider = "spawn", tool_name = "subagent", enable_run_in_background = true, agent_options = { model = { adapter = "scripted", options = { replies = [ { text = "background result", delay = 1.0 } ] } } } }
"""


def test_run_waits_for_background_jobs(tmp_path: Path) -> None:
    preset = write(tmp_path, JOB_PRESET)
    done = run_cli("dsh.cli", ["run", "--preset", str(preset), "go"], env=clean_env(), timeout=50)
    assert done.returncode == 0, done.stderr
    assert "dsh: waiting for 1 background job to finish: subagent-1 (background work)" in (
        done.stderr
    )
    # The completion notice started another turn of the lead; its answer is the answer.
    assert done.stdout.startswith("the job is back:")
    assert "background result" in done.stdout


def test_detach_kills_background_jobs_and_says_which(tmp_path: Path) -> None:
    preset = write(tmp_path, JOB_PRESET)
    started = time.monotonic()
    done = run_cli(
        "dsh.cli", ["run", "--detach", "--preset", str(preset), "go"], env=clean_env(), timeout=50
    )
    assert done.returncode == 0, done.stderr
    assert "dsh: --detach: killed 1 background job: subagent-1 (background work)" in done.stderr
    assert done.stdout == "started it\n"
    assert time.monotonic() - started < 10


# -- permission prompts on the terminal -----------------------------------------------------

ASK_PRESET = """
[agent.model]
adapter = "scripted"
[[agent.model.options.replies]]
tool_calls = [{ name = "shell", arguments = { command = "echo approved-$((40 + 2))" } }]
[[agent.model.options.replies]]
text = "result: {tool_results}"

[[plugin]]
name = "dsh-tool-shell"
"""


@pytest.mark.parametrize(("answer", "expected"), [(b"y\n", "approved-42"), (b"\n", "refused")])
def test_ask_permissions_prompt_on_the_terminal(
    tmp_path: Path, answer: bytes, expected: str
) -> None:
    preset = write(tmp_path, ASK_PRESET)
    run = PtyRun("run", "--preset", str(preset), "go", cwd=tmp_path)
    run.wait_for("allow? [y]es")
    plain = ANSI.sub("", run.text)
    assert "wants to run shell" in plain
    run.send(answer)
    status = run.finish()
    plain = ANSI.sub("", run.text)
    assert status == (0 if expected != "refused" else 3), plain  # 3: a call was refused
    result = plain[plain.index("result:") :]
    assert expected in result
    if expected == "refused":
        assert "approved-42" not in result


def test_without_a_terminal_ask_is_refused_with_the_core_message(tmp_path: Path) -> None:
    preset = write(tmp_path, ASK_PRESET)
    done = run_cli("dsh.cli", ["run", "--preset", str(preset), "go"], env=clean_env(), timeout=50)
    assert done.returncode == 3, done.stderr  # finished with failures: a refused call
    assert "nobody can answer" in done.stdout
    assert "--yes" in done.stdout
    yes = run_cli(
        "dsh.cli", ["run", "--yes", "--preset", str(preset), "go"], env=clean_env(), timeout=50
    )
    assert yes.returncode == 0, yes.stderr
    assert "approved-42" in yes.stdout
