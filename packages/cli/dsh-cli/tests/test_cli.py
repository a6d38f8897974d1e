"""The dsh command, run as a real process."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from dsh.testing.processes import run_cli

pytestmark = pytest.mark.timeout(60)


def dsh(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return run_cli("dsh.cli", args, cwd=cwd, timeout=50)


def test_demo_delegates_through_spawn_and_fork(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    done = dsh("demo", "--sessions-dir", str(sessions))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert '[spawn] "inventory the work"' in out
    assert '[fork] "recall the context"' in out
    assert "fresh child (spawn): I see 0 earlier turns" in out
    assert "forked child (fork): I see 1 earlier turn(s)" in out
    assert "lead: Both subagents reported back:" in out
    assert "delegation tree:" in out
    assert "usage: lead" in out
    files = sorted(sessions.glob("*.jsonl"))
    assert len(files) == 3  # the lead and its two children
    headers = [json.loads(f.read_text().splitlines()[0]) for f in files]
    lead = next(h for h in headers if h["parent_session"] is None)
    children = [h for h in headers if h["parent_session"] == lead["id"]]
    assert sorted(h["meta"]["subagent_provider"] for h in children) == ["fork", "spawn"]
    fork = next(h for h in children if h["meta"]["subagent_provider"] == "fork")
    assert fork["meta"]["seed_length"] == 4
    assert fork["seed_from"] == lead["id"]


def test_run_without_a_model_says_how_to_configure_one(tmp_path: Path) -> None:
    done = dsh("run", "hello", cwd=tmp_path)
    assert done.returncode == 2
    assert "no model is configured" in done.stderr
    assert "[agent.model]" in done.stderr
    assert "dsh demo" in done.stderr


def test_run_with_a_preset(tmp_path: Path) -> None:
    preset = tmp_path / "dsh.toml"
    preset.write_text(
        '[agent.model]\nadapter = "scripted"\n'
        '[[agent.model.options.replies]]\ntext = "echo: {prompt}"\n'
    )
    done = dsh("run", "--trust", "ping", cwd=tmp_path)  # ./dsh.toml, not trusted yet
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "echo: ping"
    failing = tmp_path / "failing.toml"
    failing.write_text(
        '[agent.model]\nadapter = "scripted"\n[[agent.model.options.replies]]\nerror = "boom"\n'
    )
    done = dsh("run", "--preset", str(failing), "ping")
    assert done.returncode == 1
    assert "turn ended error: model call failed: boom" in done.stderr


def test_bad_preset_row_is_reported(tmp_path: Path) -> None:
    preset = tmp_path / "bad.toml"
    preset.write_text('[agent.model]\nadapter = "scripted"\n[[plugin]]\nname = "no-such-plugin"\n')
    done = dsh("run", "--preset", str(preset), "x")
    assert done.returncode == 2
    assert (
        f'{preset} row 1 (id "no-such-plugin", plugin "no-such-plugin"): unknown plugin'
        in done.stderr
    )


def test_presets_lists_shipped_presets() -> None:
    done = dsh("presets")
    assert done.returncode == 0
    assert {"demo", "standard"} <= set(done.stdout.split())
    assert dsh("presets", "list").stdout == done.stdout


def test_presets_show_prints_one() -> None:
    done = dsh("presets", "show", "standard")
    assert done.returncode == 0, done.stderr
    assert 'name = "dsh-tool-fs"' in done.stdout
    assert done.stdout.startswith("# The standard dsh preset")
    missing = dsh("presets", "show", "nope")
    assert missing.returncode == 2
    assert 'no preset named "nope"' in missing.stderr
    assert "standard" in missing.stderr


def test_preset_accepts_a_shipped_name(tmp_path: Path) -> None:
    # --preset standard is the standard preset (which has no model: says so, exit 2).
    done = dsh("run", "--preset", "standard", "hi", cwd=tmp_path)
    assert done.returncode == 2
    assert "no model is configured in " in done.stderr
    assert "presets/standard.toml" in done.stderr
    unknown = dsh("run", "--preset", "nonesuch", "hi", cwd=tmp_path)
    assert unknown.returncode == 2
    assert 'no preset file "nonesuch" and no preset named "nonesuch"' in unknown.stderr
    missing = dsh("run", "--preset", "missing.toml", "hi", cwd=tmp_path)
    assert missing.returncode == 2
    assert "no preset file missing.toml" in missing.stderr


def test_cwd_is_checked(tmp_path: Path) -> None:
    done = dsh("run", "--cwd", str(tmp_path / "nope"), "hi")
    assert done.returncode == 2
    assert "--cwd" in done.stderr
    assert "no such directory" in done.stderr
    file = tmp_path / "f"
    file.write_text("")
    done = dsh("run", "--cwd", str(file), "hi")
    assert done.returncode == 2
    assert "not a directory" in done.stderr


def test_cwd_is_where_dsh_toml_is_found_and_the_agent_works(tmp_path: Path) -> None:
    (tmp_path / "dsh.toml").write_text(
        '[agent.model]\nadapter = "scripted"\n'
        '[[agent.model.options.replies]]\ntool_calls = [{ name = "read_file",'
        ' arguments = { path = "here.txt" } }]\n'
        '[[agent.model.options.replies]]\ntext = "{tool_results}"\n'
        '[[plugin]]\nname = "dsh-tool-fs"\n'
    )
    (tmp_path / "here.txt").write_text("the right folder\n")
    done = dsh("run", "--trust", "--cwd", str(tmp_path), "read it")
    assert done.returncode == 0, done.stderr
    assert "the right folder" in done.stdout


def test_init_writes_a_commented_preset_and_refuses_to_overwrite(tmp_path: Path) -> None:
    done = dsh("init", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    written = (tmp_path / "dsh.toml").read_text()
    assert written.startswith("# dsh.toml")
    assert 'extends = "standard"' in written
    again = dsh("init", cwd=tmp_path)
    assert again.returncode == 1
    assert "already exists" in again.stderr
    assert (tmp_path / "dsh.toml").read_text() == written
    # It loads: the standard rows, and the environment supplies the model.
    from dsh.core import load_preset

    preset = load_preset(tmp_path / "dsh.toml")
    assert {"dsh-tool-fs", "dsh-tool-shell", "tool-subagent"} <= {r.id for r in preset.plugin}
    assert preset.agent.model is None
    # You wrote it with dsh init: trusted as written; an edit asks again.
    from dsh.core.plugins import UntrustedPresetError, check_trust

    check_trust(tmp_path / "dsh.toml")
    with (tmp_path / "dsh.toml").open("a") as edited:
        edited.write("# edited\n")
    with pytest.raises(UntrustedPresetError, match="changed"):
        check_trust(tmp_path / "dsh.toml")


def test_a_dsh_toml_with_only_a_model_extends_the_standard_preset(tmp_path: Path) -> None:
    (tmp_path / "dsh.toml").write_text(
        'extends = "standard"\n[agent.model]\nadapter = "scripted"\n'
        '[[agent.model.options.replies]]\ntext = "tools: {prompt}"\n'
        '[[plugin]]\nid = "tool-subagent-fork"\ndisabled = true\n'
    )
    done = dsh("run", "--trust", "ping", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "tools: ping\n"


def test_unknown_adapter_is_a_clear_config_error(tmp_path: Path) -> None:
    (tmp_path / "dsh.toml").write_text('[agent.model]\nadapter = "openai"\nmodel = "m"\n')
    done = dsh("run", "--trust", "hi", cwd=tmp_path)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "[agent.model] of" in done.stderr
    assert 'no LLM adapter named "openai" (registered: scripted)' in done.stderr
    assert 'extends = "standard"' in done.stderr
    (tmp_path / "dsh.toml").write_text('[agent.model]\nadapter = "gpt"\n')
    done = dsh("run", "--trust", "hi", cwd=tmp_path)
    assert done.returncode == 2
    assert 'no LLM adapter named "gpt" (registered: scripted)' in done.stderr


def test_unknown_provider_on_a_tool_row_names_the_row(tmp_path: Path) -> None:
    (tmp_path / "dsh.toml").write_text(
        '[agent.model]\nadapter = "scripted"\n'
        '[[plugin]]\nname = "dsh-tool-subagent"\nconfig = { provider = "spwan" }\n'
    )
    done = dsh("run", "--trust", "hi", cwd=tmp_path)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert '"spwan"' in done.stderr
    assert "dsh-tool-subagent" in done.stderr
