"""dsh.tool_jobs — the model-facing job tools over ``ctx.jobs``.

``job_output {job_id, wait, timeout_ms}``, ``job_list`` and ``job_kill {job_id,
reason}``. An agent sees and stops only its own jobs. Load it from a preset::

    [[plugin]]
    name = "dsh-tool-jobs"
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from dsh.core import Context, EffectScope, Plugin
from dsh.tool_jobs.tools import (
    DEFAULT_TIMEOUT_MS,
    JobAccessError,
    JobKillArgs,
    JobListArgs,
    JobOutputArgs,
    job_kill_tool,
    job_list_tool,
    job_output_tool,
    owned_job,
    wait_for_job,
)

__all__ = [
    "DEFAULT_TIMEOUT_MS",
    "JobAccessError",
    "JobKillArgs",
    "JobListArgs",
    "JobOutputArgs",
    "JobToolsConfig",
    "job_kill_tool",
    "job_list_tool",
    "job_output_tool",
    "owned_job",
    "plugin",
    "wait_for_job",
]


class JobToolsConfig(BaseModel):
    """Config of ``dsh-tool-jobs`` (none yet)."""

    model_config = ConfigDict(extra="forbid")


def apply(ctx: Context, config: JobToolsConfig, effects: EffectScope) -> None:
    """Register ``job_output``, ``job_list`` and ``job_kill``."""
    for tool in (job_output_tool, job_list_tool, job_kill_tool):
        effects.add(ctx.tools.register(tool))


plugin = Plugin("dsh-tool-jobs", apply, JobToolsConfig)
