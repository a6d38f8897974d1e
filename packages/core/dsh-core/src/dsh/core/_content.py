"""Content blocks: the one shape of message content across dsh.

A block is a JSON object with a ``type``; text blocks are ``{"type": "text",
"text": ...}``. A plain string is accepted wherever content is, and wrapped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["Content", "ContentBlock", "as_blocks", "text_block", "text_of"]

ContentBlock = Mapping[str, Any]
Content = str | Sequence[ContentBlock]


def text_block(text: str) -> dict[str, Any]:
    """A text content block."""
    return {"type": "text", "text": text}


def as_blocks(content: Content) -> list[dict[str, Any]]:
    """Normalise ``content`` to a list of blocks; a string becomes one text block.

    Raises ``TypeError`` naming the offending value for anything else.
    """
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if type(content) is list:  # the common, already-normalised case: copy the blocks
        # (a loop, not all() over a generator: this runs for every prompt of every child)
        for b in content:
            if type(b) is not dict or type(b.get("type")) is not str:
                break
        else:
            return [b.copy() for b in content]
    blocks: list[dict[str, Any]] = []
    for index, block in enumerate(content):
        if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
            raise TypeError(
                f"content block {index} must be a mapping with a string 'type', got {block!r}"
            )
        blocks.append(dict(block))
    return blocks


def text_of(blocks: Sequence[ContentBlock] | None) -> str:
    """The concatenated text of the text blocks in ``blocks``."""
    if not blocks:
        return ""
    if len(blocks) == 1:
        only = blocks[0]
        return str(only.get("text", "")) if only.get("type") == "text" else ""
    return "".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")
