"""Configuration of one ``a2a`` provider instance (one ``[[plugin]]`` row)."""

from __future__ import annotations

import re
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from dsh.subagent.kit import RemoteTimeouts

__all__ = ["A2AProviderConfig", "Transport"]

Transport = Literal["jsonrpc", "http+json"]
"""A2A protocol bindings the provider speaks: JSON-RPC over HTTP and HTTP+JSON (REST).
gRPC is not supported yet."""

_DEFAULT_TRANSPORTS: tuple[Transport, ...] = ("jsonrpc", "http+json")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$")


def _env_name(value: str, field: str) -> str:
    if not _ENV_NAME.match(value):
        raise ValueError(
            f"{field} names an environment variable (such as A2A_TOKEN), not a secret itself;"
            f" {_shape(value)} is not a variable name. Secrets come from the environment only,"
            " never from a preset"
        )
    return value


def _shape(value: str) -> str:
    """What a rejected value looks like, without repeating it (it may be a secret)."""
    return f"a {len(value)}-character value"


class A2AProviderConfig(RemoteTimeouts):
    """Config of ``dsh-subagent-a2a``: which A2A agent to delegate to, and how.

    ::

        [[plugin]]
        name = "dsh-subagent-a2a"
        [plugin.config]
        url = "https://agents.example.com/reviewer/"
        bearer_token_env = "REVIEWER_TOKEN"     # the variable's name, never the token

    ``start_timeout`` (fetching the agent card), ``turn_timeout`` and ``cancel_grace``
    are the fields every out-of-process provider shares
    (:class:`dsh.subagent.kit.RemoteTimeouts`). Secrets are never written here: the
    token and header values are read from the environment variables named by
    ``bearer_token_env`` and ``headers_env`` when a run starts.
    """

    url: str = Field(..., min_length=1)
    """The agent's base URL (its card is at ``<url>/.well-known/agent-card.json``)."""
    name: str = Field("a2a", pattern=r"^[A-Za-z0-9_.:-]{1,64}$")
    """Provider name in ``ctx.subagents``; give each row its own to reach several agents."""
    card_path: str | None = None
    """Path of the agent card relative to ``url`` (default ``/.well-known/agent-card.json``)."""
    bearer_token_env: str | None = None
    """Environment variable holding a bearer token (sent as ``Authorization: Bearer ...``)."""
    headers_env: dict[str, str] = {}
    """Extra request headers: header name → the environment variable holding its value."""
    transports: list[Transport] = Field(default_factory=lambda: list(_DEFAULT_TRANSPORTS))
    """Protocol bindings in order of preference; the first one the card offers is used."""
    streaming: bool = True
    """Stream (``SendStreamingMessage``) where the card says the agent streams; else
    (or with ``false``) send the message and poll the task (``GetTask``)."""
    poll_interval: float = Field(0.5, gt=0)
    """Seconds between ``GetTask`` polls when not streaming."""
    depth_limit: bool = False
    """The agent honours dsh's delegation depth limit (``dsh a2a`` does): the provider
    then has the ``depth_limit`` capability, and the start fails unless the agent card
    declares dsh's extension with ``depthLimit``. The depth and the inherited limit are
    sent to every agent either way (``message.metadata.dsh``)."""
    budget: bool = False
    """The agent enforces the budget dsh sends it in ``message.metadata.dsh.budget`` on
    its own tree and reports the stop back (``dsh a2a`` does): the provider then has
    the ``budget`` capability, and a start with a budget fails
    (``UNSUPPORTED_CAPABILITY``) unless the agent card declares dsh's extension with
    ``budget``. The time cap, and the tokens the agent reports in its usage progress,
    are also enforced from this side."""

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"url must be an http(s) URL, got {value!r}")
        if parts.username is not None or parts.password is not None:
            raise ValueError(
                "url must not carry credentials (user:password@); put secrets in the"
                " environment and name the variables in bearer_token_env / headers_env"
            )
        return value

    @field_validator("card_path")
    @classmethod
    def _check_card_path(cls, value: str | None) -> str | None:
        if value is not None and ("://" in value or not value.strip()):
            raise ValueError("card_path is a path relative to url, such as /agent-card.json")
        return value

    @field_validator("bearer_token_env")
    @classmethod
    def _check_token_env(cls, value: str | None) -> str | None:
        return None if value is None else _env_name(value, "bearer_token_env")

    @field_validator("headers_env")
    @classmethod
    def _check_headers_env(cls, value: dict[str, str]) -> dict[str, str]:
        for header, variable in value.items():
            if not _HEADER_NAME.match(header):
                raise ValueError(f"headers_env: {header!r} is not a header name")
            _env_name(variable, f"headers_env[{header!r}]")
        return value

    @field_validator("transports")
    @classmethod
    def _check_transports(cls, value: list[Transport]) -> list[Transport]:
        if not value:
            raise ValueError("transports needs at least one of jsonrpc, http+json")
        return list(dict.fromkeys(value))

    @model_validator(mode="after")
    def _one_authorization(self) -> A2AProviderConfig:
        if self.bearer_token_env is not None and any(
            header.lower() == "authorization" for header in self.headers_env
        ):
            raise ValueError("set either bearer_token_env or headers_env.Authorization, not both")
        return self
