"""What dsh adds on top of A2A: an agent card extension and the ``dsh`` metadata key.

A ``dsh a2a`` server advertises :data:`LINEAGE_EXTENSION_URI` in its agent card
(``capabilities.extensions``, ``params = {"depthLimit": true, "progress": true}``):
it reads the caller's delegation depth and limit from message metadata
(``metadata.dsh = {"depth", "maxDepth", "parentSession"}``, see
:class:`dsh.subagent.kit.Lineage`) and refuses a task deeper than the limit; it
reports progress items (:class:`dsh.subagent.SubagentProgress` as JSON, ``path``
relative to the served agent) in the metadata of its status updates
(``metadata.dsh.progress``), and the tree-wide usage and the dsh stop reason in the
metadata of the final status update (``metadata.dsh.usage``,
``metadata.dsh.stopReason``), which the SDK merges into the task's metadata.
"""

from __future__ import annotations

import json
from typing import Any

from dsh.subagent.kit import LINEAGE_EXTENSION_URI
from dsh.subagent.kit import plain_value as plain

__all__ = ["ARTIFACT_ID", "LINEAGE_EXTENSION_URI", "META_KEY", "plain", "to_struct_value"]

META_KEY = "dsh"
"""The metadata key dsh reads and writes (lineage, progress, usage, stop reason)."""

ARTIFACT_ID = "response"
"""The artifact that holds the answer: the text of the agent's last non-empty
message, streamed in chunks (``append = false`` starts the next message)."""


def to_struct_value(value: Any) -> Any:
    """``value`` made JSON-safe for a protobuf ``Struct`` (unknown types as strings)."""
    return json.loads(json.dumps(value, default=str))
