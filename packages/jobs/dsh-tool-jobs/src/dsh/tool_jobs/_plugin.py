"""The ``dsh-tool-jobs`` plugin: registers ``job_output``, ``job_list`` and ``job_kill``."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from dsh.core import Context, EffectScope, Plugin
from dsh.tool_jobs._tools import job_kill_tool, job_list_tool, job_output_tool

__all__ = ["JobToolsConfig", "plugin"]


class JobToolsConfig(BaseModel):
    """Config of ``dsh-tool-jobs`` (none yet)."""

    model_config = ConfigDict(extra="forbid")


def apply(ctx: Context, config: JobToolsConfig, effects: EffectScope) -> None:
    """Register ``job_output``, ``job_list`` and ``job_kill``."""
    for tool in (job_output_tool, job_list_tool, job_kill_tool):
        effects.add(ctx.tools.register(tool))


plugin = Plugin("dsh-tool-jobs", apply, JobToolsConfig)
"""The ``dsh-tool-jobs`` plugin (entry point in the ``dsh.plugins`` group)."""
