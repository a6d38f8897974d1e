"""Readable text for pydantic validation errors, in one format across dsh."""

from __future__ import annotations

import types
import typing
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from dsh.core._suggest import did_you_mean

__all__ = ["validation_problems"]


def validation_problems(exc: ValidationError, model: type[BaseModel] | None = None) -> str:
    """``field.path: message; ...`` for every error in ``exc`` (``(root)`` for the whole).

    With ``model`` (the model that was validated), an unknown key close to a known one
    says ``did you mean "..."?``."""
    problems = []
    for err in exc.errors():
        text = f"{'.'.join(str(p) for p in err['loc']) or '(root)'}: {err['msg']}"
        if model is not None and err["type"] == "extra_forbidden" and err["loc"]:
            hint = did_you_mean(str(err["loc"][-1]), _keys_at(model, err["loc"][:-1]))
            if hint:
                text += f" ({hint})"
        problems.append(text)
    return "; ".join(problems)


def _keys_at(model: type[BaseModel], path: Sequence[int | str]) -> list[str]:
    """The keys the (nested) model at ``path`` accepts; none when the path leaves the
    models (a list, a dict, a union of several models)."""
    current: Any = model
    for part in path:
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return []
        field = current.model_fields.get(str(part))
        if field is None:
            return []
        current = _the_model(field.annotation)
    if not (isinstance(current, type) and issubclass(current, BaseModel)):
        return []
    keys = []
    for name, field in current.model_fields.items():
        keys.append(name)
        if isinstance(field.alias, str):
            keys.append(field.alias)
    return keys


def _the_model(annotation: Any) -> Any:
    """``annotation``'s one model (``Model``, ``Model | None``), else ``annotation``."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        models = [
            arg
            for arg in typing.get_args(annotation)
            if isinstance(arg, type) and issubclass(arg, BaseModel)
        ]
        return models[0] if len(models) == 1 else annotation
    return annotation
