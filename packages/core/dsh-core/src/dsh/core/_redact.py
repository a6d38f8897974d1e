"""Credentials in URLs, hidden before text reaches a terminal, a log, a trace or a peer.

A URL may carry a secret in two places: its userinfo (``https://user:pass@host``,
``https://token@host``) and its query or fragment (``?api_key=...``,
``#access_token=...``). :func:`redact_urls` finds every ``scheme://`` URL in a text
and hides both, leaving the rest (scheme, host, port, path, other parameters) as
it was, so a message still says where something failed.
"""

from __future__ import annotations

import re

__all__ = ["REDACTED", "redact_urls"]

REDACTED = "***"
"""What a hidden credential becomes."""

_URL = re.compile(r"""\b[A-Za-z][A-Za-z0-9+.-]*://[^\s"'<>`]+""")
"""A URL: a scheme, ``://``, then up to white space, a quote, ``<``, ``>`` or a backtick."""

_AUTHORITY_END = re.compile(r"[/?#\\]")

_SECRET_NAME = re.compile(
    r"(?i)key|token|secret|passw|pwd|auth|credential|signature|session|^sig$|^code$"
)
"""Query (and fragment) parameter names whose values are credentials: ``api_key``,
``access_token``, ``client_secret``, ``password``, ``X-Amz-Signature``, ``sig``..."""

_TRAILING = ".,;:!?)]}"
"""Punctuation after a URL in prose (``see http://h/?token=t.``), not part of it."""

_PARAMETER = re.compile(r"([^&;=]+)=([^&;]*)")

_HIDDEN = re.compile(r"\*+|\[redacted\]?")
"""A value hidden already (by this module, or ``[redacted]`` by another redactor)."""


def redact_urls(text: str) -> str:
    """``text`` with the credentials of every URL in it replaced by ``***``.

    ``http://user:pass@host/v1`` → ``http://***@host/v1`` (also ``user@``), and the
    value of a query or fragment parameter named like a secret (``api_key``,
    ``token``, ``secret``, ``password``, ``access_token``, ``sig``...) →
    ``?api_key=***``. Any scheme counts (``https``, ``wss``, ``postgres``...); text
    without URLs comes back unchanged. Idempotent.
    """
    if "://" not in text:
        return text
    return _URL.sub(_redact_match, text)


def _redact_match(match: re.Match[str]) -> str:
    url = match.group(0)
    stripped = url.rstrip(_TRAILING)
    return _redact_one(stripped) + url[len(stripped) :]


def _redact_one(url: str) -> str:
    scheme_end = url.index("://") + 3
    rest = url[scheme_end:]
    end = _AUTHORITY_END.search(rest)
    authority, tail = (rest[: end.start()], rest[end.start() :]) if end else (rest, "")
    if "@" in authority:
        # the last "@" ends the userinfo (a password may hold an unencoded "@")
        authority = REDACTED + authority[authority.rindex("@") :]
    return url[:scheme_end] + authority + _redact_parameters(tail)


def _redact_parameters(tail: str) -> str:
    """Path, query and fragment with the values of secret-named parameters hidden."""
    tail, hash_mark, fragment = tail.partition("#")
    path, question_mark, query = tail.partition("?")
    if question_mark:
        query = _PARAMETER.sub(_redact_parameter, query)
    if hash_mark:
        fragment = _PARAMETER.sub(_redact_parameter, fragment)
    return path + question_mark + query + hash_mark + fragment


def _redact_parameter(match: re.Match[str]) -> str:
    name, value = match.group(1), match.group(2)
    if value and not _HIDDEN.fullmatch(value) and _SECRET_NAME.search(name):
        return f"{name}={REDACTED}"
    return match.group(0)
