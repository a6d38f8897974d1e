"""The configuration of MCP servers: one model for preset rows and ACP clients' servers."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from dsh.core.permissions import PermissionPolicy, SandboxConfig
from dsh.core.plugins import validation_problems
from dsh.subprocess import EnvVariables, env_from_pairs
from dsh.tool_mcp._errors import McpConfigError
from dsh.tool_mcp._transports import DEFAULT_MAX_MESSAGE_BYTES

__all__ = ["McpPluginConfig", "McpServerConfig", "Transport", "servers_from_acp"]

Transport = Literal["stdio", "http", "sse"]

DEFAULT_TOOL_TIMEOUT = 120.0
"""Seconds a tool call may take unless the server's ``tool_timeout`` says otherwise."""

_SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_NOT_A_NAME_CHARACTER = re.compile(r"[^A-Za-z0-9_-]+")

_STDIO_ONLY = (
    "command",
    "args",
    "env",
    "passthrough_env",
    "cwd",
    "eof_grace",
    "term_grace",
    "max_message_bytes",
)
_HTTP_ONLY = ("url", "headers", "headers_env")


class McpServerConfig(BaseModel):
    """One MCP server: a command to run (stdio) or a URL (streamable HTTP, or SSE).

    Secrets come from the environment only: ``passthrough_env`` (stdio) names the
    variables the server inherits, ``headers_env`` (HTTP) maps a header to the
    variable holding its value. ``env`` and ``headers`` are written into the preset
    as they are: not a place for keys.
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field(..., min_length=1, max_length=64)
    """Unique per preset row (per agent for attached servers); its tools are named
    ``<name>__<tool>``. Letters, digits, ``_`` and ``-``."""
    transport: Transport | None = None
    """``stdio`` (set ``command``), ``http`` (streamable HTTP, set ``url``) or ``sse``
    (the older HTTP+SSE transport). Unset: ``stdio`` with a command, ``http`` with a URL."""
    permission: PermissionPolicy = "ask"
    """Default permission policy of this server's tools (the preset's
    ``[permissions]`` still overrides it per tool)."""
    tools: list[str] | None = None
    """Only these of the server's tools (by the server's names); a name the server does
    not offer fails the start. Unset: every tool."""
    start_timeout: float = Field(30.0, gt=0)
    """Seconds the server gets to start, initialize and list its tools."""
    tool_timeout: float | None = Field(DEFAULT_TOOL_TIMEOUT, gt=0)
    """Seconds a tool call may take before it is abandoned with an error result (the
    server is sent ``notifications/cancelled``). ``None`` (from code): no limit."""
    max_output_chars: int = Field(100_000, ge=100)
    """Longer tool output is cut to this many characters (with a note saying so)."""

    # stdio
    command: str | None = Field(None, min_length=1)
    """The executable (looked up on ``PATH``)."""
    args: list[str] = []
    """Arguments after ``command``."""
    env: EnvVariables = {}
    """Variables set on top of the credential-scrubbed environment."""
    passthrough_env: list[str] = []
    """Variables the server inherits from this process as they are (API keys...)."""
    cwd: str | None = None
    """Where the server runs; relative to the context's (or agent's) cwd. Unset: that cwd."""
    eof_grace: float = Field(2.0, ge=0)
    """Stop: seconds the server gets to exit after its stdin closes, before SIGTERM."""
    term_grace: float = Field(2.0, ge=0)
    """Stop: seconds its process group gets after SIGTERM, before SIGKILL."""
    sandbox: SandboxConfig | None = None
    """Narrows the sandbox the server runs in (``{ network = true }`` only where the
    preset's ``[sandbox]`` allows the network): a stdio server runs under the agent's
    (or the context's) sandbox, which a row can never widen."""
    allow_write: list[str] = []
    """Protected paths (``.git``, ``.dsh``, preset files) the server may write anyway,
    absolute or relative to its working directory."""
    max_message_bytes: int = Field(DEFAULT_MAX_MESSAGE_BYTES, ge=1024)
    """Longest message (one line of its stdout) the server may send, in bytes. A longer
    one fails every pending call at once and stops the server."""

    # http / sse
    url: str | None = None
    """The server's endpoint (``http://`` or ``https://``)."""
    headers: dict[str, str] = {}
    """Headers sent as they are (not for secrets)."""
    headers_env: dict[str, str] = {}
    """Header → the environment variable holding its value (``MY_TOKEN``), or a
    template naming variables (``Bearer ${MY_TOKEN}``). A variable that is not set
    fails the start."""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _SERVER_NAME.match(value):
            raise ValueError(
                f"invalid MCP server name {value!r}: use letters, digits, '_' and '-' only"
                " (it prefixes the names of the server's tools)"
            )
        return value

    @field_validator("passthrough_env")
    @classmethod
    def _passthrough(cls, value: list[str]) -> list[str]:
        for name in value:
            if not _ENV_NAME.match(name):
                raise ValueError(f"invalid environment variable name {name!r}")
        return value

    @field_validator("headers")
    @classmethod
    def _headers(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            _check_header_name(name)
            if "\n" in text or "\r" in text:
                raise ValueError(f"header {name!r}: value must be one line")
        return value

    @field_validator("headers_env")
    @classmethod
    def _headers_env(cls, value: dict[str, str]) -> dict[str, str]:
        for name, source in value.items():
            _check_header_name(name)
            if not _ENV_NAME.match(source) and not _ENV_REFERENCE.search(source):
                raise ValueError(
                    f"headers_env[{name!r}] = {source!r}: give an environment variable name"
                    " (MY_TOKEN) or a template naming one (Bearer ${MY_TOKEN})"
                )
        return value

    @model_validator(mode="after")
    def _shape(self) -> McpServerConfig:
        given = self.model_fields_set
        kind = self.transport
        if kind is None:
            if self.command is not None and self.url is not None:
                raise ValueError(
                    "set either command (a stdio server) or url (an HTTP server), not both"
                )
            if self.command is not None:
                kind = "stdio"
            elif self.url is not None:
                kind = "http"
            else:
                raise ValueError("set command (a stdio server) or url (an HTTP server)")
        if kind == "stdio":
            if self.command is None:
                raise ValueError("a stdio server needs a command")
            wrong = [field for field in _HTTP_ONLY if field in given]
            if wrong:
                raise ValueError(
                    f"{', '.join(wrong)}: only for HTTP servers (this one runs a command)"
                )
        else:
            if self.url is None:
                raise ValueError(f"an {kind} server needs a url")
            if not self.url.startswith(("http://", "https://")):
                raise ValueError(f"url must start with http:// or https://, got {self.url!r}")
            wrong = [field for field in _STDIO_ONLY if field in given]
            if wrong:
                raise ValueError(f"{', '.join(wrong)}: only for stdio servers (this one has a url)")
        self.transport = kind
        return self

    @property
    def kind(self) -> Transport:
        """The transport (never None once validated)."""
        assert self.transport is not None
        return self.transport

    def resolved_headers(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """``headers`` plus ``headers_env`` resolved against ``environ`` (default
        ``os.environ``); a variable that is not set raises :class:`McpConfigError`."""
        source = os.environ if environ is None else environ
        resolved = dict(self.headers)
        for header, reference in self.headers_env.items():
            names = [reference] if _ENV_NAME.match(reference) else _ENV_REFERENCE.findall(reference)
            missing = [name for name in names if not source.get(name)]
            if missing:
                raise McpConfigError(
                    f'MCP server "{self.name}": header {header!r} comes from environment'
                    f" variable {', '.join(missing)}, which is not set",
                    server=self.name,
                )
            if _ENV_NAME.match(reference):
                value = source[reference]
            else:
                value = _ENV_REFERENCE.sub(lambda m: source[m.group(1)], reference)
            if "\n" in value or "\r" in value:
                raise McpConfigError(
                    f'MCP server "{self.name}": the value of header {header!r} (from the'
                    " environment) is not one line",
                    server=self.name,
                )
            resolved[header] = value
        return resolved


class McpPluginConfig(BaseModel):
    """Config of the ``dsh-tool-mcp`` plugin: the servers whose tools every agent gets."""

    model_config = ConfigDict(extra="forbid")

    servers: list[McpServerConfig] = []
    """The MCP servers (``[[plugin.config.servers]]``), with names unique in the row."""

    @field_validator("servers")
    @classmethod
    def _unique(cls, value: list[McpServerConfig]) -> list[McpServerConfig]:
        check_unique_names(value)
        return value


def check_unique_names(servers: Iterable[McpServerConfig]) -> None:
    """``ValueError`` naming the first server name given twice."""
    seen: set[str] = set()
    for server in servers:
        if server.name in seen:
            raise ValueError(f'two MCP servers are named "{server.name}": names must be unique')
        seen.add(server.name)


def _check_header_name(name: str) -> None:
    if not _HEADER_NAME.match(name):
        raise ValueError(f"invalid HTTP header name {name!r}")


def safe_server_name(name: str) -> str:
    """``name`` made usable as a server name (tool-name prefix): runs of other
    characters become ``_``, at most 64 characters."""
    cleaned = _NOT_A_NAME_CHARACTER.sub("_", name.strip()).strip("_")[:64]
    return cleaned or "mcp"


def servers_from_acp(
    entries: Iterable[Mapping[str, Any]],
    *,
    permission: PermissionPolicy = "ask",
    **options: Any,
) -> list[McpServerConfig]:
    """Convert the ``mcpServers`` of an ACP ``session/new`` (or ``session/load``)
    request, as raw JSON objects, to server configs.

    * stdio: ``{"name", "command", "args", "env": [{"name", "value"}]}`` (``type``
      absent or ``"stdio"``);
    * ``{"type": "http", "name", "url", "headers": [{"name", "value"}]}``;
    * ``{"type": "sse", "name", "url", "headers": [...]}``.

    Names are made usable as tool-name prefixes (``"My Files"`` → ``My_Files``);
    ``env`` and ``headers`` values are taken as given (the client chose them).
    ``permission`` and ``options`` (any other :class:`McpServerConfig` field, e.g.
    ``start_timeout``) apply to every server. An entry that cannot be converted, or
    two that end up with the same name, raise :class:`McpConfigError` naming them.
    """
    configs: list[McpServerConfig] = []
    origin: dict[str, str] = {}
    for index, entry in enumerate(entries):
        label = _entry_label(index, entry)
        if not isinstance(entry, Mapping):
            raise McpConfigError(f"MCP server {label}: expected a JSON object, got {entry!r}")
        kind = entry.get("type") or "stdio"
        raw_name = entry.get("name")
        if not isinstance(raw_name, str) or not raw_name.strip():
            raise McpConfigError(f"MCP server {label}: no name")
        name = safe_server_name(raw_name)
        fields: dict[str, Any] = {"name": name, "permission": permission, **options}
        try:
            if kind == "stdio":
                fields.update(
                    transport="stdio",
                    command=entry.get("command"),
                    args=list(entry.get("args") or []),
                    env=_pairs(entry.get("env"), "env"),
                )
            elif kind in ("http", "sse"):
                fields.update(
                    transport=kind,
                    url=entry.get("url"),
                    headers=_pairs(entry.get("headers"), "headers"),
                )
            else:
                raise McpConfigError(
                    f"MCP server {label}: unsupported type {kind!r}"
                    " (dsh supports stdio, http, sse)",
                    server=name,
                )
            config = McpServerConfig.model_validate(fields)
        except ValidationError as exc:
            raise McpConfigError(
                f"MCP server {label}: {validation_problems(exc)}", server=name
            ) from None
        except (TypeError, ValueError) as exc:
            raise McpConfigError(f"MCP server {label}: {exc}", server=name) from None
        if name in origin:
            raise McpConfigError(
                f'MCP servers {origin[name]} and {label} would both be named "{name}":'
                " give them different names",
                server=name,
            )
        origin[name] = label
        configs.append(config)
    return configs


def _entry_label(index: int, entry: object) -> str:
    name = entry.get("name") if isinstance(entry, Mapping) else None
    return f"#{index + 1} ({name!r})" if isinstance(name, str) else f"#{index + 1}"


def _pairs(value: object, field: str) -> dict[str, str]:
    """ACP's ``[{"name", "value"}]`` lists (a plain object is accepted too)."""
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return {str(k): str(v) for k, v in value.items()}
    try:
        return env_from_pairs(value)
    except ValueError as exc:
        raise TypeError(f"{field} {exc}") from None
