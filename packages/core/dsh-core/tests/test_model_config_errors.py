"""An unknown model adapter, or options its adapter rejects: a ConfigError that says
what is registered, never a bare traceback."""

from __future__ import annotations

import pytest

from dsh.core import ConfigError, Context, Preset, parse_preset
from dsh.core.models import ModelConfig, ModelConfigError

pytestmark = pytest.mark.anyio


async def test_unknown_adapter_is_a_config_error_listing_the_registered_ones() -> None:
    preset = parse_preset('[agent.model]\nadapter = "gpt"\n')
    async with Context.open(preset) as ctx:
        with pytest.raises(
            ConfigError, match=r'no LLM adapter named "gpt" \(registered: scripted\)'
        ):
            ctx.agents.create()
        with pytest.raises(ValueError, match="no LLM adapter"):  # still a ValueError too
            ctx.llm.bind(ModelConfig(adapter="gpt"))


async def test_options_the_adapter_rejects_name_the_adapter() -> None:
    async with Context.open(Preset()) as ctx:
        with pytest.raises(ModelConfigError, match='LLM adapter "scripted": ') as caught:
            ctx.llm.bind(ModelConfig(adapter="scripted", options={"replies": "nope"}))
        assert isinstance(caught.value, ConfigError)
