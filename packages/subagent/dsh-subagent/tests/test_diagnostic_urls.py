"""A run's diagnostic never carries a credential in a URL, whoever builds the result,
and redaction happens before the cap (a cut cannot leave half a password behind)."""

from __future__ import annotations

from dsh.subagent import SubagentResult
from dsh.subagent.kit import DIAGNOSTIC_LIMIT, cap_diagnostic


def test_a_result_diagnostic_hides_credentials_in_urls() -> None:
    result = SubagentResult(
        "",
        "error",
        diagnostic="acp child: cannot reach http://user:s3cret@127.0.0.1:9/v1?token=s3cret",
    )
    assert result.diagnostic == "acp child: cannot reach http://***@127.0.0.1:9/v1?token=***"


def test_a_long_diagnostic_is_redacted_before_it_is_cut() -> None:
    # the cut falls inside the password: cut first, and no "@" would mark it as one
    url = "http://user:s3cret" + "p" * 400 + "@host/v1"
    text = "x" * (DIAGNOSTIC_LIMIT - 200) + url
    capped = cap_diagnostic(text)
    assert capped is not None
    assert "s3cret" not in capped
