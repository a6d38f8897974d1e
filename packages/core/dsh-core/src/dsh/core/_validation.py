"""Readable text for pydantic validation errors, in one format across dsh."""

from __future__ import annotations

from pydantic import ValidationError

__all__ = ["validation_problems"]


def validation_problems(exc: ValidationError) -> str:
    """``field.path: message; ...`` for every error in ``exc`` (``(root)`` for the whole)."""
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or '(root)'}: {err['msg']}" for err in exc.errors()
    )
