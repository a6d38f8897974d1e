"""Calls are priced from the genai-prices table: by the server's URL or the model name,
cached input tokens at their own rate; an unknown model, or ``pricing = "none"``, has
no cost."""

from __future__ import annotations

from typing import Any

import genai_prices
import pytest

from dsh.core import AbortSignal, ModelRequest, Usage
from dsh.core.models import ModelDone
from dsh.llm_openai import OpenAIChatAdapter, OpenAIOptions
from dsh.llm_openai._pricing import price
from dsh.llm_openai.stream import ChunkAssembler
from dsh.testing.model_servers import ChatReply, OpenAIChatServer

pytestmark = pytest.mark.anyio


def table(model: str, provider: str, usage: Usage) -> float:
    """What the table itself says (no prices copied into the test)."""
    cached = usage.cached_input_tokens or 0
    found = genai_prices.calc_price(
        genai_prices.Usage(
            input_tokens=usage.input_tokens,
            cache_read_tokens=cached,
            output_tokens=usage.output_tokens,
        ),
        model_ref=model,
        provider_id=provider,
    )
    return float(found.total_price)


async def done_of(srv: OpenAIChatServer, model: str, **options: Any) -> ModelDone:
    srv.script(ChatReply(text="hi", usage={"prompt_tokens": 1200, "completion_tokens": 300}))
    opts = OpenAIOptions(base_url=srv.api_base, api_key_env="", model=model, **options)
    async with OpenAIChatAdapter(opts) as adapter:
        request = ModelRequest("", "terse", [], ())
        events = [e async for e in adapter.stream(request, AbortSignal())]
    last = events[-1]
    assert isinstance(last, ModelDone)
    return last


async def test_a_known_model_is_priced_by_its_name_on_any_server() -> None:
    with OpenAIChatServer() as srv:
        done = await done_of(srv, "gpt-4o-mini")
    assert done.usage is not None
    assert done.usage.cost_usd == pytest.approx(table("gpt-4o-mini", "openai", done.usage))
    assert done.usage.cost_usd > 0


async def test_unknown_model_or_pricing_none_has_no_cost() -> None:
    with OpenAIChatServer() as srv:
        unknown = await done_of(srv, "qwen3:8b")
        off = await done_of(srv, "gpt-4o-mini", pricing="none")
    assert unknown.usage == Usage(1200, 300)
    assert off.usage == Usage(1200, 300)


def usage_of(completion_usage: dict[str, Any]) -> Usage:
    assembler = ChunkAssembler()
    completion = {
        "choices": [{"message": {"content": "x"}, "finish_reason": "stop"}],
        "usage": completion_usage,
    }
    list(assembler.feed_completion(completion))
    (done,) = assembler.finish()
    assert isinstance(done, ModelDone)
    assert done.usage is not None
    return done.usage


def test_cached_tokens_are_read_and_priced_at_their_rate() -> None:
    openai = usage_of(
        {
            "prompt_tokens": 10_000,
            "completion_tokens": 500,
            "prompt_tokens_details": {"cached_tokens": 8_000},
        }
    )
    deepseek = usage_of(
        {
            "prompt_tokens": 10_000,
            "completion_tokens": 500,
            "prompt_cache_hit_tokens": 8_000,
            "prompt_cache_miss_tokens": 2_000,
        }
    )
    assert openai == Usage(10_000, 500, 8_000)
    assert deepseek == Usage(10_000, 500, 8_000)
    uncached = Usage(10_000, 500)
    for model, url, provider, usage in [
        ("gpt-4o-mini", "https://api.openai.com/v1", "openai", openai),
        ("deepseek-chat", "https://api.deepseek.com", "deepseek", deepseek),
    ]:
        cost = price(usage, model, url, "auto")
        assert cost == pytest.approx(table(model, provider, usage))
        full = price(uncached, model, url, "auto")
        assert cost is not None
        assert full is not None
        assert cost < full  # the cached part was cheaper
    # A provider named outright wins over the URL.
    named = price(uncached, "deepseek-chat", "http://127.0.0.1:9/v1", "deepseek")
    assert named == pytest.approx(table("deepseek-chat", "deepseek", uncached))
