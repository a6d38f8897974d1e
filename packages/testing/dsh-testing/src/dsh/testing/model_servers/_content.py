"""Reading the JSON of a recorded request, as the protocol servers all need to."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from dsh.testing.model_servers._http import RecordedRequest

__all__ = ["json_body", "mappings", "text_parts"]


def json_body(request: RecordedRequest) -> Mapping[str, Any]:
    """The request's JSON body when it is an object, else an empty mapping."""
    return request.json if isinstance(request.json, Mapping) else {}


def mappings(value: Any) -> list[Mapping[str, Any]]:
    """The mappings in ``value`` when it is a list (anything else: none)."""
    if not isinstance(value, list):
        return []
    return [item for item in value if isinstance(item, Mapping)]


def text_parts(content: Any, kinds: Collection[str] | None, sep: str = "\n") -> str:
    """A message's text: ``content`` itself when it is a string, else the ``text`` of
    its parts whose ``type`` is in ``kinds`` (None: every part), joined by ``sep``."""
    if isinstance(content, str):
        return content
    return sep.join(
        str(part.get("text", ""))
        for part in mappings(content)
        if kinds is None or part.get("type") in kinds
    )
