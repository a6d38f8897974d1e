"""The codex provider routes codex's model endpoint through the run's tape
(``DSH_TAPE_PROXY``): one ``-c`` override, worked out from the row, its
``config_overrides`` and codex's config.toml. (The real codex through a recording and
a replaying tape: tests-integration/test_tapes.py; this package's tests run from
committed tapes: test_codex_taped.py.)"""

from __future__ import annotations

from pathlib import Path

from dsh.subagent.kit import TAPE_PROXY_VARIABLE, taped_url
from dsh.subagent_codex import CodexConfig
from dsh.subagent_codex._tape import OPENAI_API, codex_argv

PROXY = "http://127.0.0.1:4000/token"
TAPED = {TAPE_PROXY_VARIABLE: PROXY}


def override(argv: list[str]) -> str:
    assert argv[-2] == "-c"
    return argv[-1]


def test_no_tape_no_override(tmp_path: Path) -> None:
    config = CodexConfig(codex_home=str(tmp_path))
    assert codex_argv(config, {}) == config.argv


def test_a_provider_of_config_toml_gets_its_base_url_routed(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(
        'model_provider = "fake"\n[model_providers.fake]\nbase_url = "http://127.0.0.1:1/v1"\n'
    )
    config = CodexConfig(codex_home=str(tmp_path))
    taped = taped_url("http://127.0.0.1:1/v1", "codex", TAPED)
    assert override(codex_argv(config, TAPED)) == f'model_providers.fake.base_url="{taped}"'


def test_the_row_and_its_overrides_win_over_config_toml(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text('model_provider = "fake"\n')
    overrides = {
        "model_providers.mine": {"name": "m", "base_url": "https://mine/v1"},
        "model_provider": "other",
    }
    config = CodexConfig(
        codex_home=str(tmp_path), config_overrides=overrides, model_provider="mine"
    )
    taped = taped_url("https://mine/v1", "codex", TAPED)
    assert override(codex_argv(config, TAPED)) == f'model_providers.mine.base_url="{taped}"'


def test_the_built_in_openai_provider_gets_openai_base_url(tmp_path: Path) -> None:
    config = CodexConfig(codex_home=str(tmp_path))
    taped = taped_url(OPENAI_API, "codex", TAPED)
    assert override(codex_argv(config, TAPED)) == f'openai_base_url="{taped}"'
    env = {**TAPED, "OPENAI_BASE_URL": "https://gateway/v1"}
    taped = taped_url("https://gateway/v1", "codex", env)
    assert override(codex_argv(config, env)) == f'openai_base_url="{taped}"'


def test_a_local_built_in_provider_is_not_routed(tmp_path: Path) -> None:
    config = CodexConfig(codex_home=str(tmp_path), model_provider="ollama")
    assert codex_argv(config, TAPED) == config.argv
