"""Diagnostics: safe, bounded text explaining how a run ended."""

from __future__ import annotations

import re

from dsh.core.tracing import redact_urls

__all__ = [
    "DIAGNOSTIC_LIMIT",
    "TRUNCATION_SUFFIX",
    "cap_diagnostic",
    "clean_text",
    "redact_secrets",
]

DIAGNOSTIC_LIMIT = 4096
"""Maximum size of a diagnostic in UTF-8 bytes, suffix included."""

TRUNCATION_SUFFIX = "\n[diagnostic truncated]"

_SUFFIX_BYTES = len(TRUNCATION_SUFFIX.encode())


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """``text`` with lone surrogates (not encodable as UTF-8) replaced by U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _LONE_SURROGATE.sub("\ufffd", text)
    return text


def cap_diagnostic(text: str | None) -> str | None:
    """Cap ``text`` at :data:`DIAGNOSTIC_LIMIT` UTF-8 bytes, cut on a character boundary.

    A cut text ends with :data:`TRUNCATION_SUFFIX`; the total stays within the limit.
    Lone surrogates become U+FFFD; credentials in URLs become ``***``
    (:func:`dsh.core.tracing.redact_urls`).
    """
    if text is None:
        return None
    text = redact_urls(clean_text(text))
    if len(text) * 4 <= DIAGNOSTIC_LIMIT:
        return text
    data = text.encode("utf-8")
    if len(data) <= DIAGNOSTIC_LIMIT:
        return text
    head = data[: DIAGNOSTIC_LIMIT - _SUFFIX_BYTES].decode("utf-8", errors="ignore")
    return head + TRUNCATION_SUFFIX


_SECRET_PATTERNS = [
    # KEY=value / token: value pairs whose name looks like a credential
    re.compile(
        r"(?i)\b([A-Z0-9_.-]*(?:api[_-]?key|token|secret|password|passwd|credential|auth)"
        r"[A-Z0-9_.-]*)(\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|(?:(?:bearer|basic|token)\s+)?\S+)"
    ),
    re.compile(r"(?i)\b(bearer)(\s+)([A-Za-z0-9._~+/=-]{8,})"),
    # well-known key shapes
    re.compile(r"()()\b(sk-[A-Za-z0-9_-]{12,}|ghp_[A-Za-z0-9]{20,}|AKIA[0-9A-Z]{16})\b"),
]


def redact_secrets(text: str) -> str:
    """Replace credential-looking values in ``text`` with ``[redacted]``."""
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(lambda m: f"{m.group(1)}{m.group(2)}[redacted]", text)
    return text
