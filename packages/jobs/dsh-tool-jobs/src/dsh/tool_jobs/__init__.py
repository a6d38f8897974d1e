"""dsh.tool_jobs — the model-facing job tools over ``ctx.jobs``.

``job_output {job_id, wait, timeout_ms}``, ``job_list`` and ``job_kill {job_id,
reason}``. An agent sees and stops only its own jobs. Load it from a preset::

    [[plugin]]
    name = "dsh-tool-jobs"
"""

from dsh.tool_jobs._plugin import JobToolsConfig, plugin
from dsh.tool_jobs._tools import (
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
