"""The model of a preset that configures none, as the commands say it.

The rule lives in dsh-core (:func:`dsh.core.model_from_env`) and the context applies
it (:meth:`dsh.core.Context.default_model`), so ``dsh run``, ``dsh acp`` and Python's
``Context.open(...)`` pick the same model. Here: which model a command will use, for
its notice (``dsh: model deepseek-chat at https://api.deepseek.com (DEEPSEEK_API_KEY is
set)``). What ``dsh acp`` tells an editor when there is none is dsh-acp's.
"""

from __future__ import annotations

from collections.abc import Mapping

from dsh.core import Preset, model_from_env
from dsh.core.models import EnvModel

__all__ = ["EnvModel", "env_model_for"]


def env_model_for(preset: Preset, environ: Mapping[str, str] | None = None) -> EnvModel | None:
    """The model the environment gives ``preset`` (None when the preset names its own,
    or the environment names none): what the context will use."""
    if preset.agent.model is not None:
        return None
    return model_from_env(environ)
