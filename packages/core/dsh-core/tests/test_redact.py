"""redact_urls: credentials in URLs hidden, everything else kept; errors, turn errors and
sessions never carry them."""

from __future__ import annotations

import pytest

from dsh.core import Context, DshError, parse_preset
from dsh.core.models import ModelError
from dsh.core.tracing import redact_urls

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("http://user:pass@host/v1", "http://***@host/v1"),
        ("https://token@github.com/o/r.git", "https://***@github.com/o/r.git"),
        ("wss://u:p@h:443/socket", "wss://***@h:443/socket"),
        ("postgres://app:pw@db:5432/main", "postgres://***@db:5432/main"),
        # several URLs in one string, and prose around them
        (
            "tried http://a:1@one/x then https://b:2@two:8080/y, both failed",
            "tried http://***@one/x then https://***@two:8080/y, both failed",
        ),
        # IPv6 hosts, with and without userinfo
        ("http://u:p@[::1]:8000/v1", "http://***@[::1]:8000/v1"),
        ("http://[fe80::1%25eth0]:80/v1", "http://[fe80::1%25eth0]:80/v1"),
        # "@" in the path, the query or the fragment is not userinfo
        ("http://host/users/@me", "http://host/users/@me"),
        ("http://host/a?mail=x@y.z#at@b", "http://host/a?mail=x@y.z#at@b"),
        # a password holding an unencoded "@" (the last one ends the userinfo)
        ("http://user:p@ss@host/", "http://***@host/"),
        ("http://user:p%40ss@host/", "http://***@host/"),
        # no userinfo: unchanged
        ("http://127.0.0.1:9/v1/chat/completions", "http://127.0.0.1:9/v1/chat/completions"),
        ("no url at all, user:pass@host", "no url at all, user:pass@host"),
        ("", ""),
        # secret-named query and fragment parameters
        (
            "https://h/v1?api_key=K&model=m&access_token=T",
            "https://h/v1?api_key=***&model=m&access_token=***",
        ),
        ("https://h/cb#access_token=T&state=s", "https://h/cb#access_token=***&state=s"),
        ("https://h/?x=1#token=T", "https://h/?x=1#token=***"),
        ("https://b.blob/c?sv=1&sig=S%2Fx", "https://b.blob/c?sv=1&sig=***"),
        ("https://h/?Password=P;client_secret=C", "https://h/?Password=***;client_secret=***"),
        ("https://h/?token=", "https://h/?token="),
        # quotes, brackets and sentence punctuation end a URL
        ("url='http://u:p@h/x'", "url='http://***@h/x'"),
        ('{"url": "http://u:p@h/x"}', '{"url": "http://***@h/x"}'),
        ("(see http://u:p@h/x?token=T).", "(see http://***@h/x?token=***)."),
        ("<http://u:p@h>", "<http://***@h>"),
        # redacting twice changes nothing more
        ("http://***@h/?token=***", "http://***@h/?token=***"),
        ("http://h/?token=[redacted] and", "http://h/?token=[redacted] and"),
    ],
)
def test_redact_urls(text: str, expected: str) -> None:
    assert redact_urls(text) == expected
    assert redact_urls(expected) == expected


def test_dsh_errors_never_print_credentials() -> None:
    error = ModelError("cannot connect to http://user:s3cret@127.0.0.1:9/v1: refused", status=None)
    assert str(error) == "cannot connect to http://***@127.0.0.1:9/v1: refused"
    assert "s3cret" not in f"{error}"
    wrapped = DshError(f"loading failed: {error}")
    assert str(wrapped) == "loading failed: cannot connect to http://***@127.0.0.1:9/v1: refused"


@pytest.mark.anyio
async def test_a_failed_turn_records_the_error_without_credentials() -> None:
    preset = parse_preset(
        """
[agent.model]
adapter = "scripted"
[[agent.model.options.replies]]
error = "cannot connect to http://user:s3cret@127.0.0.1:9/v1/chat/completions"
"""
    )
    async with Context.open(preset) as ctx:
        outcome = await ctx.agents.create().run("go")
    assert outcome.stop_reason == "error"
    assert outcome.error == (
        "model call failed: cannot connect to http://***@127.0.0.1:9/v1/chat/completions"
    )
