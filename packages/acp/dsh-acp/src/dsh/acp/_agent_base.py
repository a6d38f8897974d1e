"""The agent side of ACP, for agents written with ``agent-client-protocol``.

The provider is an ACP *client*; this module serves the other end: the
``dsh acp`` server (dsh-cli) and the mock ACP agent (``dsh-testing[acp]``) both
build on :class:`AcpAgentBase`.

Every optional ``acp.Agent`` method of :class:`AcpAgentBase` answers JSON-RPC
"method not found" (-32601): an inherited ``acp.Agent`` Protocol stub would answer
``null``, which a client takes for success. ``initialize`` and ``session/new`` are
written out here once, in the wire shape of the ``acp`` library, over hooks
(:meth:`~AcpAgentBase.capabilities`, :meth:`~AcpAgentBase.agent_info`,
:meth:`~AcpAgentBase.open_session`); a subclass implements ``open_session``,
``session/prompt`` and ``session/cancel``, and overrides whatever else it supports.
That holds for the methods of whichever ``agent-client-protocol`` is installed (0.12
or 1.0): an ``acp.Agent`` method not written out here (1.0 adds
``session/delete``, ``logout``, ``nes/*``, ``document/*``...) is refused too, a
request with "method not found", a notification by ignoring it.

Importing this module imports ``acp`` (about 1 s): import it where an agent is
served, not at the top of a command module (see ``docs/performance.md``, "ACP cold
start"). Importing :mod:`dsh.subagent_acp` itself does not import it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine
from typing import Any

from acp import PROTOCOL_VERSION, Agent, RequestError
from acp.schema import (
    AcpMcpServer,
    AgentCapabilities,
    AudioContentBlock,
    AuthenticateResponse,
    ClientCapabilities,
    CloseSessionResponse,
    EmbeddedResourceContentBlock,
    ForkSessionResponse,
    HttpMcpServer,
    ImageContentBlock,
    Implementation,
    InitializeResponse,
    ListSessionsResponse,
    LoadSessionResponse,
    McpServerStdio,
    NewSessionResponse,
    ResourceContentBlock,
    ResumeSessionResponse,
    SetSessionConfigOptionResponse,
    SetSessionModeResponse,
    SseMcpServer,
    TextContentBlock,
)

__all__ = ["AcpAgentBase", "McpServer", "PromptBlock"]

PromptBlock = (
    TextContentBlock
    | ImageContentBlock
    | AudioContentBlock
    | ResourceContentBlock
    | EmbeddedResourceContentBlock
)
"""A content block of a ``session/prompt`` request."""

McpServer = HttpMcpServer | SseMcpServer | AcpMcpServer | McpServerStdio
"""An MCP server a client offers in ``session/new`` (and load, fork, resume)."""


class AcpAgentBase(Agent):
    """An ``acp.Agent`` that keeps the client connection and refuses what it lacks.

    :meth:`on_connect` stores the client proxy in ``self._conn`` (for
    ``session_update`` and ``request_permission``). ``initialize`` keeps the request's
    ``_meta.dsh`` in :attr:`init_meta` and answers :attr:`protocol_version`,
    :meth:`capabilities` and :meth:`agent_info`; ``session/new`` is
    :meth:`open_session`. Every optional method answers "method not found" and
    ``_``-prefixed extension notifications are ignored; subclasses override what they
    support.
    """

    _conn: Any = None
    """The client proxy (``session_update``, ``request_permission``); None until
    :meth:`on_connect`."""
    protocol_version: int = PROTOCOL_VERSION
    """The protocol version ``initialize`` answers."""
    init_meta: Any = None
    """The ``_meta.dsh`` of the client's ``initialize`` (None before it, or without one)."""

    def on_connect(self, conn: Any) -> None:
        """Keep the connection (the client proxy) for updates and requests to the client."""
        self._conn = conn

    def capabilities(self) -> AgentCapabilities:
        """The capabilities ``initialize`` advertises (none by default)."""
        return AgentCapabilities()

    def agent_info(self) -> Implementation | None:
        """The ``agentInfo`` ``initialize`` answers (none by default)."""
        return None

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: ClientCapabilities | None = None,
        client_info: Implementation | None = None,
        **kwargs: Any,
    ) -> InitializeResponse:
        """See the class docstring (no auth methods)."""
        self.init_meta = kwargs.get("dsh")
        return InitializeResponse(
            protocol_version=self.protocol_version,
            agent_capabilities=self.capabilities(),
            agent_info=self.agent_info(),
            auth_methods=[],
        )

    async def new_session(
        self,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: list[McpServer] | None = None,
        **kwargs: Any,
    ) -> NewSessionResponse:
        """:meth:`open_session` with the request's MCP servers and ``_meta``."""
        return await self.open_session(cwd, mcp_servers or [], kwargs)

    async def open_session(
        self, cwd: str, mcp_servers: list[McpServer], meta: dict[str, Any]
    ) -> NewSessionResponse:
        """Open a session in ``cwd`` (``session/new``; ``meta``: the request's ``_meta``).
        Subclasses implement it."""
        raise NotImplementedError(f"{type(self).__name__} does not implement open_session")

    async def load_session(
        self,
        cwd: str,
        session_id: str,
        mcp_servers: list[McpServer] | None = None,
        additional_directories: list[str] | None = None,
        **kwargs: Any,
    ) -> LoadSessionResponse | None:
        """Not supported (``loadSession`` is not advertised)."""
        raise RequestError.method_not_found("session/load")

    async def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None, **kwargs: Any
    ) -> ListSessionsResponse:
        """Not supported."""
        raise RequestError.method_not_found("session/list")

    async def set_session_mode(
        self, session_id: str, mode_id: str, **kwargs: Any
    ) -> SetSessionModeResponse | None:
        """Not supported (no modes)."""
        raise RequestError.method_not_found("session/set_mode")

    async def set_config_option(
        self, config_id: str, session_id: str, value: str | bool, **kwargs: Any
    ) -> SetSessionConfigOptionResponse | None:
        """Not supported (no config options)."""
        raise RequestError.method_not_found("session/set_config_option")

    async def authenticate(self, method_id: str, **kwargs: Any) -> AuthenticateResponse | None:
        """Not supported (no auth methods are advertised)."""
        raise RequestError.method_not_found("authenticate")

    async def fork_session(
        self,
        session_id: str,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: list[McpServer] | None = None,
        **kwargs: Any,
    ) -> ForkSessionResponse:
        """Not supported."""
        raise RequestError.method_not_found("session/fork")

    async def resume_session(
        self,
        session_id: str,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: list[McpServer] | None = None,
        **kwargs: Any,
    ) -> ResumeSessionResponse:
        """Not supported (``session/load`` replays a session where it is supported)."""
        raise RequestError.method_not_found("session/resume")

    async def close_session(self, session_id: str, **kwargs: Any) -> CloseSessionResponse | None:
        """Not supported."""
        raise RequestError.method_not_found("session/close")

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Not supported (no extension methods)."""
        raise RequestError.method_not_found(f"_{method}")

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        """Ignored (no extension notifications)."""
        return None


def _refusal(name: str, stub: Any) -> Callable[..., Coroutine[Any, Any, Any]]:
    """A handler for the ``acp.Agent`` method ``name`` that refuses it (its wire name
    from the 1.0 route metadata, else the Python name)."""
    route = getattr(stub, "__route__", None)
    method = str(getattr(route, "method", name))
    if getattr(route, "kind", "request") == "notification":

        async def ignore(self: Any, *args: Any, **kwargs: Any) -> None:
            return None

        handler = ignore
    else:

        async def refuse(self: Any, *args: Any, **kwargs: Any) -> Any:
            raise RequestError.method_not_found(method)

        handler = refuse
    handler.__name__ = handler.__qualname__ = name
    handler.__doc__ = f"Not supported ({method})."
    return handler


_SUBCLASS_IMPLEMENTS = frozenset({"prompt", "cancel"})


def _refuse_protocol_stubs(cls: type) -> None:
    """Replace every ``acp.Agent`` Protocol stub ``cls`` would inherit (a body of
    ``...`` that answers ``null``) with a refusal, but the ones a subclass implements."""
    for name, stub in vars(Agent).items():
        if name.startswith("_") or name in _SUBCLASS_IMPLEMENTS:
            continue
        if not inspect.iscoroutinefunction(stub):
            continue
        if getattr(cls, name, None) is stub:
            setattr(cls, name, _refusal(name, stub))


_refuse_protocol_stubs(AcpAgentBase)
