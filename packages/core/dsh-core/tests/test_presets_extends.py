"""``extends``: a preset built on another one (a named preset, or a file)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dsh.core import PresetError, load_named_preset, load_preset, parse_preset
from dsh.core import _presets as presets_module
from dsh.core.plugins import named_presets

BASE = """
[agent]
persona = "base persona"
max_steps = 7
sessions_dir = "base-sessions"
[agent.model]
adapter = "scripted"
options = { mode = "sequence" }

[[plugin]]
name = "dsh-llm-openai"

[[plugin]]
id = "tool-a"
name = "dsh-tool-subagent"
config = { provider = "spawn", tool_name = "a" }

[[plugin]]
id = "tool-b"
name = "dsh-tool-subagent"
config = { provider = "fork", tool_name = "b" }

[permissions]
default = "ask"
[permissions.tools]
read_file = "allow"
shell = "ask"
"""


def write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path


def test_extends_a_file_relative_to_the_preset_and_merges(tmp_path: Path) -> None:
    write(tmp_path / "shared", "base.toml", BASE)
    top = write(
        tmp_path / "project",
        "dsh.toml",
        """
extends = "../shared/base.toml"
[agent]
persona = "my persona"
[agent.model]
adapter = "openai"
model = "deepseek-chat"

[[plugin]]
id = "tool-b"
disabled = true

[[plugin]]
id = "tool-a"
name = "dsh-tool-subagent"
config = { provider = "spawn", tool_name = "a2", max_depth = 1 }

[[plugin]]
name = "dsh-tool-fs"

[permissions.tools]
shell = "deny"
""",
    )
    preset = load_preset(top)
    # [agent]: keys given override; a table given replaces the base's whole.
    assert preset.agent.persona == "my persona"
    assert preset.agent.max_steps == 7
    assert preset.agent.model is not None
    assert preset.agent.model.adapter == "openai"
    assert preset.agent.model.options == {}
    # sessions_dir resolves against the folder of the file that says it.
    assert preset.agent.sessions_dir == str((tmp_path / "shared" / "base-sessions").resolve())
    # [[plugin]]: same id replaces in place (keys merged), new rows appended.
    assert [r.id for r in preset.plugin] == ["dsh-llm-openai", "tool-a", "tool-b", "dsh-tool-fs"]
    rows = {r.id: r for r in preset.plugin}
    assert rows["tool-a"].config == {"provider": "spawn", "tool_name": "a2", "max_depth": 1}
    assert rows["tool-b"].disabled is True
    assert rows["tool-b"].name == "dsh-tool-subagent"
    assert rows["tool-b"].config["tool_name"] == "b"
    assert [r.id for _, r in preset.enabled_rows()] == ["dsh-llm-openai", "tool-a", "dsh-tool-fs"]
    # [permissions]: default kept, tools merged per tool.
    assert preset.permissions.default == "ask"
    assert preset.permissions.tools == {"read_file": "allow", "shell": "deny"}
    assert preset.source == str(top)


def test_a_row_with_a_default_id_replaces_the_base_row_of_that_plugin(tmp_path: Path) -> None:
    base = write(tmp_path, "base.toml", BASE)
    top = write(
        tmp_path,
        "top.toml",
        f'extends = "{base.name}"\n[[plugin]]\nname = "dsh-llm-openai"\n'
        'config = { base_url = "http://127.0.0.1:1/v1" }\n',
    )
    preset = load_preset(top)
    assert [r.id for r in preset.plugin].count("dsh-llm-openai") == 1
    assert preset.plugin[0].config == {"base_url": "http://127.0.0.1:1/v1"}


def test_chains_and_cycles(tmp_path: Path) -> None:
    write(tmp_path, "a.toml", BASE)
    write(tmp_path, "b.toml", 'extends = "a.toml"\n[agent]\npersona = "b"\n')
    c = write(tmp_path, "c.toml", 'extends = "b.toml"\n[agent]\nmax_steps = 3\n')
    preset = load_preset(c)
    assert (preset.agent.persona, preset.agent.max_steps) == ("b", 3)
    write(tmp_path, "x.toml", 'extends = "y.toml"\n')
    y = write(tmp_path, "y.toml", 'extends = "x.toml"\n')
    with pytest.raises(PresetError, match="extends cycle"):
        load_preset(y)


def test_errors_name_the_file_they_are_in(tmp_path: Path) -> None:
    write(tmp_path, "bad-base.toml", '[[plugin]]\nname = "x"\nconfg = {}\n')
    top = write(tmp_path, "top.toml", 'extends = "bad-base.toml"\n')
    with pytest.raises(PresetError) as caught:
        load_preset(top)
    message = str(caught.value)
    assert "bad-base.toml" in message
    assert "in the preset it extends" in message
    assert "confg" in message
    missing = write(tmp_path, "missing.toml", 'extends = "nowhere.toml"\n')
    with pytest.raises(PresetError, match=r"cannot read preset .*nowhere\.toml"):
        load_preset(missing)
    nameless = write(tmp_path, "nameless.toml", 'extends = "top.toml"\n[[plugin]]\nid = "new"\n')
    with pytest.raises(PresetError, match=r"nameless\.toml"):
        load_preset(nameless)
    rows = '[[plugin]]\nid = "t"\nname = "a"\n[[plugin]]\nid = "t"\nname = "b"\n'
    dup = write(tmp_path, "dup.toml", 'extends = "bad-base.toml"\n' + rows)
    with pytest.raises(PresetError, match="duplicate id"):
        load_preset(dup)
    with pytest.raises(PresetError, match="extends must be"):
        parse_preset("extends = 3\n")


class _FakeEntryPoint:
    def __init__(self, name: str, target: Any) -> None:
        self.name = name
        self.value = f"fake:{name}"
        self._target = target

    def load(self) -> Any:
        return self._target


def test_named_presets_come_from_entry_points(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base_file = write(tmp_path / "pkg", "base.toml", BASE)

    class Resource:  # like an importlib.resources Traversable
        def read_text(self, encoding: str = "utf-8") -> str:
            return '[agent]\npersona = "from a resource"\n'

    points = [_FakeEntryPoint("base", base_file), _FakeEntryPoint("res", Resource())]
    monkeypatch.setattr(presets_module, "entry_points", lambda group: points)
    assert named_presets() == {"base": "fake:base", "res": "fake:res"}
    top = parse_preset('extends = "base"\n[agent]\nmax_steps = 2\n', source="top")
    assert (top.agent.persona, top.agent.max_steps) == ("base persona", 2)
    # A named file preset's relative paths resolve against its own folder.
    assert top.agent.sessions_dir == str((tmp_path / "pkg" / "base-sessions").resolve())
    assert load_named_preset("res").agent.persona == "from a resource"
    with pytest.raises(PresetError, match=r'no preset named "nope" \(installed: base, res\)'):
        parse_preset('extends = "nope"\n')


def test_preset_dir_is_the_folder_of_the_file_that_has_the_row(tmp_path: Path) -> None:
    base = tmp_path / "team"
    base.mkdir()
    (base / "base.toml").write_text(
        '[[plugin]]\nname = "dsh-subagent-acp"\nid = "child"\n'
        'config = { command = "dsh", args = ["acp", "--preset", "{preset_dir}/child.toml"] }\n'
    )
    mine = tmp_path / "me" / "dsh.toml"
    mine.parent.mkdir()
    mine.write_text(
        'extends = "../team/base.toml"\n\n[[plugin]]\nname = "dsh-testing-example"\n'
        'config = { prefix = "{preset_dir}: " }\n'
    )
    preset = load_preset(mine)
    rows = {row.id: row for row in preset.plugin}
    assert rows["child"].config["args"] == ["acp", "--preset", f"{base.resolve()}/child.toml"]
    assert rows["dsh-testing-example"].config["prefix"] == f"{mine.parent.resolve()}: "


def test_preset_dir_without_a_file_is_a_clear_error() -> None:
    with pytest.raises(PresetError, match=r"\{preset_dir\} is only known for a preset read from"):
        parse_preset('[[plugin]]\nname = "x"\nconfig = { path = "{preset_dir}/a" }\n')
