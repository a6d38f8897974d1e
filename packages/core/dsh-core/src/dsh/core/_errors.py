"""The root of dsh's error tree."""

from __future__ import annotations

from dsh.core._redact import redact_urls

__all__ = ["ConfigError", "DshError"]


class DshError(Exception):
    """Base of every error dsh raises on purpose (configuration, sessions, tools,
    subagents, ...): ``except DshError`` catches what dsh means to raise and lets
    programming errors through. Its text never shows a credential in a URL
    (``http://user:pass@host`` prints as ``http://***@host``, see
    :func:`~dsh.core.tracing.redact_urls`)."""

    def __str__(self) -> str:
        return redact_urls(super().__str__())


class ConfigError(DshError):
    """The configuration is missing something an operation needs, or names something
    that is not installed (no model, an unknown model adapter, ...); the message says
    what to fix."""
