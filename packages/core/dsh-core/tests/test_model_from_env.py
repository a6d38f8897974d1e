"""The model of a preset that names none: the environment's, by one rule
(``dsh.core.model_from_env``), applied by the context itself, so ``Context.open(...)``
in Python picks the model ``dsh run`` picks."""

from __future__ import annotations

from typing import Any

import pytest

from dsh.core import (
    Context,
    EffectScope,
    Plugin,
    ScriptedAdapter,
    ScriptedReply,
    last_output,
    model_from_env,
    parse_preset,
)
from dsh.core.models import ModelConfig, ModelConfigError, NoModelError
from dsh.core.plugins import NoConfig

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

MODEL_VARIABLES = (
    "OPENAI_BASE_URL",
    "OPENAI_API_KEY",
    "OPENAI_MODEL",
    "DEEPSEEK_API_KEY",
    "DEEPSEEK_MODEL",
)


@pytest.fixture(autouse=True)
def _no_model_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in MODEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_the_rule_first_set_wins() -> None:
    deepseek = model_from_env({"DEEPSEEK_API_KEY": "x"})
    assert deepseek is not None
    assert deepseek.config == ModelConfig(
        adapter="openai",
        model="deepseek-chat",
        options={"base_url": "https://api.deepseek.com", "api_key_env": "DEEPSEEK_API_KEY"},
    )
    assert deepseek.reason == "DEEPSEEK_API_KEY is set"
    openai = model_from_env({"OPENAI_API_KEY": "x", "OPENAI_MODEL": "gpt-x"})
    assert openai is not None
    assert openai.config.model == "gpt-x"
    assert openai.config.options["base_url"] == "https://api.openai.com/v1"
    both = {"OPENAI_BASE_URL": "http://127.0.0.1:8000/v1", "DEEPSEEK_API_KEY": "x"}
    local = model_from_env(both)
    assert local is not None
    assert local.config.options == {"base_url": "http://127.0.0.1:8000/v1", "api_key_env": ""}
    assert local.reason == "OPENAI_BASE_URL is set"
    assert model_from_env({"DEEPSEEK_API_KEY": "  "}) is None
    assert model_from_env({}) is None
    secret = model_from_env({"OPENAI_BASE_URL": "http://user:pw@127.0.0.1:8000/v1"})
    assert secret is not None
    assert "pw" not in secret.describe()  # the notice hides credentials in the URL


def test_it_reads_os_environ_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    assert model_from_env() is None
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-x")
    monkeypatch.setenv("DEEPSEEK_MODEL", "deepseek-reasoner")
    found = model_from_env()
    assert found is not None
    assert found.config.model == "deepseek-reasoner"


def _openai_stand_in(seen: list[ModelConfig]) -> Plugin[Any]:
    """dsh-llm-openai is not installed here: a plugin that registers the scripted
    adapter under its name, recording the config the context binds."""

    def factory(config: ModelConfig) -> ScriptedAdapter:
        seen.append(config)
        return ScriptedAdapter([ScriptedReply(text="from the environment's model")])

    def apply(ctx: Context, config: NoConfig, effects: EffectScope) -> None:
        effects.add(ctx.llm.register_adapter("openai", factory))

    return Plugin("openai-stand-in", apply)


async def test_a_preset_without_a_model_gets_the_environments(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-x")
    seen: list[ModelConfig] = []
    async with Context.open(parse_preset("[agent]\n")) as ctx:
        ctx.plugins.add(_openai_stand_in(seen))
        await ctx.plugins.load("openai-stand-in")
        agent = ctx.agents.create()
        outcome = await agent.run("hi")
        assert outcome.stop_reason == "completed"
        assert last_output(agent.session.events) == "from the environment's model"
    assert seen == [model_from_env({"DEEPSEEK_API_KEY": "sk-x"}).config]  # type: ignore[union-attr]


async def test_the_presets_own_model_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    preset = parse_preset('[agent.model]\nadapter = "scripted"\n')
    async with Context.open(preset) as ctx:
        agent = ctx.agents.create()
        outcome = await agent.run("ping")
        assert outcome.stop_reason == "completed"
        assert last_output(agent.session.events) == "Done: ping"


async def test_without_the_openai_plugin_the_error_says_which_row_to_add(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-x")
    async with Context.open(parse_preset("[agent]\n")) as ctx:
        with pytest.raises(ModelConfigError) as info:
            ctx.agents.create()
    message = str(info.value)
    assert message.startswith("the model from the environment (DEEPSEEK_API_KEY is set): ")
    assert 'no LLM adapter named "openai" (registered: scripted)' in message
    assert '[[plugin]] row with name = "dsh-llm-openai"' in message
    assert 'extends = "standard"' in message


async def test_no_model_anywhere_names_the_variables_and_the_table() -> None:
    async with Context.open(parse_preset("[agent]\n")) as ctx:
        with pytest.raises(NoModelError) as info:
            ctx.agents.create()
    message = str(info.value)
    assert message.startswith("no model is configured")
    for name in ("OPENAI_BASE_URL", "DEEPSEEK_API_KEY", "OPENAI_API_KEY", "[agent.model]"):
        assert name in message
