"""Helpers shared by out-of-process providers (acp, codex, claude-code).

Child processes in their own process group with SIGTERM-then-SIGKILL teardown,
credential-scrubbed environments, child cwd resolution, and never-raising
settlement of a run from the coroutine that drives its child.
"""

from dsh.subagent.out_of_process.cwd import check_directory, resolve_child_cwd
from dsh.subagent.out_of_process.env import SAFE_ENV_NAMES, scrubbed_env
from dsh.subagent.out_of_process.process import ChildProcess, Ending, StderrTail
from dsh.subagent.out_of_process.settle import Stages, settle_from
from dsh.subagent.out_of_process.tags import TAG_VARIABLE, ProcessTag

__all__ = [
    "SAFE_ENV_NAMES",
    "TAG_VARIABLE",
    "ChildProcess",
    "Ending",
    "ProcessTag",
    "Stages",
    "StderrTail",
    "check_directory",
    "resolve_child_cwd",
    "scrubbed_env",
    "settle_from",
]
