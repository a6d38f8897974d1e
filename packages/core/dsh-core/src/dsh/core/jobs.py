"""Jobs (``ctx.jobs``): background work owned by an agent, at most
:data:`MAX_RUNNING_PER_OWNER` running per owner, and how a job is described.
"""

from dsh.core._jobs import (
    MAX_RUNNING_PER_OWNER,
    Job,
    JobError,
    JobOutcome,
    JobRegistry,
    JobStatus,
    describe_job,
)

__all__ = [
    "MAX_RUNNING_PER_OWNER",
    "Job",
    "JobError",
    "JobOutcome",
    "JobRegistry",
    "JobStatus",
    "describe_job",
]
