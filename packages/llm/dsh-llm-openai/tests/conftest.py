"""Fixtures: a fake chat-completions server and adapter options pointing at it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dsh.llm_openai import OpenAIOptions
from dsh.testing.model_servers import OpenAIChatServer


@pytest.fixture
def chat_server() -> Iterator[OpenAIChatServer]:
    """A fresh fake server per test (strict request checks on)."""
    with OpenAIChatServer() as srv:
        yield srv


@pytest.fixture
def options(chat_server: OpenAIChatServer) -> OpenAIOptions:
    """Options for the fake server: no API key, short timeouts, no pricing (the usage
    compared as the server sent it; test_llm_openai_pricing.py prices)."""
    return OpenAIOptions(
        base_url=chat_server.api_base,
        api_key_env="",
        read_timeout=5,
        connect_timeout=2,
        pricing="none",
    )
