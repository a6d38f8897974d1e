"""The proxy's token and its upstream route: what ``DSH_TAPE_PROXY`` and
:func:`dsh.subagent.kit.taped_url` give any process of a tree, without registering."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from dsh.subagent.kit import TAPE_PROXY_VARIABLE, taped_url
from dsh.tape import TapeProxy, read_tape
from dsh.testing.model_servers import AnthropicMessagesServer, MessagesReply

pytestmark = pytest.mark.timeout(30)

BODY = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}


def post(url: str) -> httpx.Response:
    with httpx.Client(timeout=10) as client:
        return client.post(url, json=BODY)


def test_an_upstream_route_records_and_replays_under_its_label(tmp_path: Path) -> None:
    with AnthropicMessagesServer(default=MessagesReply(text="routed")) as server:
        with TapeProxy(tmp_path, "record") as proxy:  # no upstream registered
            env = proxy.env()
            assert env == {TAPE_PROXY_VARIABLE: proxy.proxy_url}
            base = taped_url(server.api_base, "claude-code", env)
            assert base.startswith(proxy.proxy_url + "/x/claude-code/")
            recorded = post(base + "/v1/messages?beta=true")
        assert len(server.requests) == 1
    assert recorded.status_code == 200, recorded.text
    (exchange,) = read_tape(tmp_path).exchanges
    assert (exchange["label"], exchange["path"]) == ("claude-code", "/v1/messages?beta=true")
    # Replay: the server is gone; the route's upstream is not contacted (any will do).
    with TapeProxy(tmp_path, "replay") as proxy:
        base = taped_url("http://127.0.0.1:9/gone", "claude-code", proxy.env())
        replayed = post(base + "/v1/messages?beta=true")
    assert replayed.content == recorded.content
    assert proxy.divergence is None


def test_without_the_token_nothing_is_served(tmp_path: Path) -> None:
    with AnthropicMessagesServer(default=MessagesReply(text="no")) as server:
        with TapeProxy(tmp_path, "record", {"api": server.api_base}) as proxy:
            good = taped_url(server.api_base, "api", proxy.env())
            root = f"http://127.0.0.1:{proxy.port}"
            token = proxy.proxy_url.rsplit("/", 1)[1]
            wrong = proxy.proxy_url[: -len(token)] + token[::-1]
            for url in (
                good.replace(proxy.proxy_url, root) + "/v1/messages",  # no token
                good.replace(proxy.proxy_url, wrong) + "/v1/messages",
                f"{root}/u/api/v1/messages",  # slice 1's form, now behind the token
            ):
                answer = post(url)
                assert answer.status_code == 404, url
                assert token not in answer.text
            assert post(proxy.base_url("api") + "/v1/messages").status_code == 200
        assert len(server.requests) == 1  # only the request with the token went through


def test_a_route_that_carries_no_http_upstream_is_refused(tmp_path: Path) -> None:
    with TapeProxy(tmp_path, "record") as proxy:
        for upstream in ("file:///etc/passwd", "not base64!"):
            url = taped_url(upstream, "x", proxy.env())
            if upstream.startswith("not"):
                url = f"{proxy.proxy_url}/x/x/{upstream.replace(' ', '')}"
            assert post(url + "/v1/messages").status_code == 400
    assert proxy.recorded == 0


def test_taped_url_is_the_upstream_when_no_tape_is_active() -> None:
    assert taped_url("https://api.example/v1", "codex", {}) == "https://api.example/v1"
    assert taped_url("https://a/v1", "codex", {TAPE_PROXY_VARIABLE: ""}) == "https://a/v1"
    assert taped_url("https://a/v1", "codex", {TAPE_PROXY_VARIABLE: "http://h:1/t/"}) == (
        "http://h:1/t/x/codex/aHR0cHM6Ly9hL3Yx"
    )
