"""Validation of request fields the runtime checks before a provider runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dsh.subagent._errors import InvalidRequest
from dsh.subagent._types import Budget

__all__ = [
    "check_budget",
    "check_max_depth",
    "check_output_schema",
    "depth_violation",
    "effective_max_depth",
]


def check_max_depth(value: object) -> None:
    """``max_depth`` must be a non-negative int (bool is not an int here)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidRequest(f"max_depth must be a non-negative integer, got {value!r}")


def check_budget(budget: object) -> None:
    """``budget`` must be a :class:`~dsh.subagent.Budget` (its caps are checked when
    it is built)."""
    if not isinstance(budget, Budget):
        raise InvalidRequest(
            f"budget must be a dsh.subagent.Budget, got {type(budget).__name__};"
            " build one with Budget(tokens=..., usd=..., seconds=..., children=..., turns=...)"
        )


def check_output_schema(schema: object) -> None:
    """``output_schema`` must be a valid JSON Schema whose root is an object."""
    if not isinstance(schema, Mapping):
        raise InvalidRequest(
            f"output_schema must be a JSON Schema object, got {type(schema).__name__}",
        )
    root = schema.get("type")
    if root != "object":
        raise InvalidRequest(
            f'output_schema must be object-rooted (type "object"), got type {root!r}',
        )
    from jsonschema import exceptions, validators  # lazy: only requests with a schema pay

    try:
        validators.validator_for(schema).check_schema(dict(schema))
    except exceptions.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        raise InvalidRequest(
            f"output_schema is not a valid JSON Schema at {where}: {exc.message}",
        ) from None


def effective_max_depth(parent_meta: Mapping[str, Any], requested: int | None) -> int | None:
    """The depth limit a child of this parent runs under: the smaller of ``requested``
    and any limit the parent inherited (``meta["max_depth"]``); None when neither is set.
    A nested chain cannot raise its own cap."""
    inherited = parent_meta.get("max_depth")
    if inherited is None:  # (a root parent: no isinstance calls)
        return requested
    if requested is None:
        return inherited if isinstance(inherited, int) else None
    return min(requested, inherited) if isinstance(inherited, int) else requested


def depth_violation(parent_meta: Mapping[str, Any], max_depth: int | None) -> str | None:
    """The depth error message if a child of this parent would be too deep, else None."""
    limit = effective_max_depth(parent_meta, max_depth)
    if limit is None:
        return None
    depth = int(parent_meta.get("delegation_depth", 0)) + 1
    if depth > limit:
        return f"subagent depth {depth} exceeds max_depth {limit}"
    return None
