"""Preset errors name the file a row is in and the row's number in that file (through
``extends``), and say ``did you mean "..."?`` for a near miss: a plugin name, a
top-level key, a key of [agent], [sandbox], a row or a plugin's config."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsh.core import Context, PresetError, load_preset, parse_preset
from dsh.core.plugins import PluginError

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

BASE_ROWS = 14  # as many rows as the standard preset has


def _base(folder: Path) -> Path:
    base = folder / "base.toml"
    rows = "".join(
        f'[[plugin]]\nid = "row-{n}"\nname = "dsh-testing-example"\ndisabled = true\n'
        for n in range(BASE_ROWS)
    )
    base.write_text('[agent.model]\nadapter = "scripted"\n' + rows, encoding="utf-8")
    return base


async def _load(path: Path) -> None:
    async with Context.open(load_preset(path)):
        pass


async def test_a_bad_row_is_named_by_its_file_and_its_own_number(tmp_path: Path) -> None:
    _base(tmp_path)
    mine = tmp_path / "dsh.toml"
    mine.write_text('extends = "base.toml"\n[[plugin]]\nname = "dsh-testing-exampel"\n')
    with pytest.raises(PluginError) as info:
        await _load(mine)
    message = str(info.value)
    assert message.startswith(
        f'{mine} row 1 (id "dsh-testing-exampel", plugin "dsh-testing-exampel"): '
        'unknown plugin "dsh-testing-exampel"; did you mean "dsh-testing-example"? (installed: '
    )
    assert f"row {BASE_ROWS + 1}" not in message
    mine.write_text('extends = "base.toml"\n[[plugin]]\nname = "qqqq"\n')  # nothing close
    with pytest.raises(PluginError) as info:
        await _load(mine)
    assert f'{mine} row 1 (id "qqqq", plugin "qqqq"): unknown plugin "qqqq" (installed: ' in str(
        info.value
    )


async def test_a_row_that_overrides_a_base_row_is_named_where_it_was_written(
    tmp_path: Path,
) -> None:
    _base(tmp_path)
    mine = tmp_path / "dsh.toml"
    mine.write_text(
        'extends = "base.toml"\n'
        '[[plugin]]\nname = "dsh-testing-example"\n'
        '[[plugin]]\nid = "row-7"\ndisabled = false\nconfig = { prefix = 42 }\n'
    )
    with pytest.raises(PluginError) as info:
        await _load(mine)
    assert str(info.value).startswith(
        f'{mine} row 2 (id "row-7", plugin "dsh-testing-example"): invalid config: prefix'
    )


async def test_a_row_of_the_base_is_named_in_the_base(tmp_path: Path) -> None:
    base = _base(tmp_path)
    base.write_text(base.read_text() + '[[plugin]]\nname = "dsh-tool-nope"\n')
    mine = tmp_path / "dsh.toml"
    mine.write_text('extends = "base.toml"\n[[plugin]]\nname = "dsh-testing-example"\n')
    with pytest.raises(PluginError) as info:
        await _load(mine)
    assert str(info.value).startswith(f'{base} row {BASE_ROWS + 1} (id "dsh-tool-nope"')


def test_a_row_that_does_not_parse_is_named_by_its_own_number(tmp_path: Path) -> None:
    _base(tmp_path)
    mine = tmp_path / "dsh.toml"
    mine.write_text('extends = "base.toml"\n[[plugin]]\nnmae = "dsh-testing-example"\n')
    with pytest.raises(PresetError) as info:
        load_preset(mine)
    message = str(info.value)
    assert message.startswith(f"{mine} row 1: ")
    assert 'nmae: Extra inputs are not permitted (did you mean "name"?)' in message


def test_near_misses_of_keys_say_did_you_mean(tmp_path: Path) -> None:
    extra = "Extra inputs are not permitted"
    cases = {
        'extend = "base.toml"\n': '"extend": did you mean "extends"?',
        'extends = "base.toml"\nplugins = []\n': '"plugins": did you mean "plugin"?',
        '[agent]\npersonna = "x"\n': f'personna: {extra} (did you mean "persona"?)',
        '[sandbox]\nmodes = "off"\n': f'modes: {extra} (did you mean "mode"?)',
        '[permissions]\ndefualt = "allow"\n': f'defualt: {extra} (did you mean "default"?)',
    }
    _base(tmp_path)
    mine = tmp_path / "dsh.toml"
    for text, hint in cases.items():
        mine.write_text(text)
        with pytest.raises(PresetError) as info:
            load_preset(mine)
        assert hint in str(info.value), text
        assert str(info.value).startswith(str(mine))
    mine.write_text("zzz = 1\n")  # nothing close: no guess
    with pytest.raises(PresetError) as info:
        load_preset(mine)
    assert "unknown top-level keys zzz (expected extends," in str(info.value)


async def test_a_config_key_near_a_known_one_says_did_you_mean() -> None:
    preset = parse_preset('[[plugin]]\nname = "dsh-testing-example"\nconfig = { prefx = "x" }\n')
    with pytest.raises(PluginError) as info:
        async with Context.open(preset):
            pass
    assert str(info.value) == (
        'preset row 1 (id "dsh-testing-example", plugin "dsh-testing-example"): invalid config:'
        ' prefx: Extra inputs are not permitted (did you mean "prefix"?)'
    )
