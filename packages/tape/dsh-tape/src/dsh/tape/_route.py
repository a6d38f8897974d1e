"""Where a request to the proxy goes: the token, then a label route or an upstream route.

* ``/<token>/u/<label>/<rest>`` — the label's upstream (given to the proxy);
* ``/<token>/x/<label>/<base64url(upstream)>/<rest>`` — the upstream the route
  carries (what :func:`dsh.subagent.kit.taped_url` builds from ``DSH_TAPE_PROXY``);
* ``/<token>/t/tools`` — an agent's tool call (:class:`dsh.core.tapes.ToolTape`).

The token is compared in constant time; a wrong one is "not found" and says nothing.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from dataclasses import dataclass
from urllib.parse import unquote

from dsh.core.tapes import TOOL_ROUTE

__all__ = ["LABEL_ROUTE", "TOOL_ROUTE", "UPSTREAM_ROUTE", "Route", "RouteError", "parse_target"]

LABEL_ROUTE = "/u/"
UPSTREAM_ROUTE = "/x/"


@dataclass(frozen=True, slots=True)
class Route:
    """A request's destination: the label, the rest of the path (query included)
    and, for an upstream route, the upstream base URL it carries."""

    label: str
    rest: str
    upstream: str | None = None
    tools: bool = False
    """The tool route (:data:`TOOL_ROUTE`): an agent's tool call, not a model call."""


@dataclass(frozen=True, slots=True)
class RouteError:
    """A target the proxy does not serve: the status and message to answer with."""

    status: int
    message: str


def parse_target(target: str, token: str) -> Route | RouteError:
    """Where ``target`` (a request target, query included) goes, or why it does not."""
    given, _, path = target.lstrip("/").partition("/")
    if not hmac.compare_digest(given.encode(), token.encode()):
        return RouteError(404, "tape proxy: not found")
    path = "/" + path
    if path == TOOL_ROUTE:
        return Route("tool", "", tools=True)
    if path.startswith(UPSTREAM_ROUTE):
        label, _, rest = path[len(UPSTREAM_ROUTE) :].partition("/")
        encoded, slash, rest = rest.partition("/")
        encoded, mark, query = encoded.partition("?")
        upstream = _decode_upstream(encoded)
        if upstream is None:
            return RouteError(400, "tape proxy: the route does not carry an http(s) upstream")
        return Route(unquote(label), f"?{query}" if mark else slash + rest, upstream)
    if path.startswith(LABEL_ROUTE):
        label, slash, rest = path[len(LABEL_ROUTE) :].partition("/")
        if "?" in label:
            label, _, query = label.partition("?")
            rest, slash = f"?{query}", ""
        return Route(unquote(label), slash + rest)
    return RouteError(
        404, f"tape proxy: paths go on with {LABEL_ROUTE}<label>/ or {UPSTREAM_ROUTE}<label>/"
    )


def _decode_upstream(encoded: str) -> str | None:
    """The upstream base URL a route carries (base64url, padding optional), or None
    when it is not an http(s) URL."""
    try:
        text = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    except (binascii.Error, ValueError):
        return None
    return text if text.startswith(("http://", "https://")) else None
