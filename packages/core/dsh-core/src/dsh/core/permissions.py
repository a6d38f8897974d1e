"""Permissions and the sandbox: the ``[permissions]`` config and its policies, the
error code of a refused call, and the sandbox's config, policy and environment switch.

:mod:`dsh.core` itself exports the pieces an application wires first:
``Permissions`` (``ctx.permissions``), ``Approver``, ``PermissionRequest`` and
``PermissionDecision``.
"""

from dsh.core._permission_config import PermissionPolicy, PermissionsConfig
from dsh.core._permissions import PERMISSION_REFUSED
from dsh.core._sandbox import (
    PROTECTED_NAMES,
    SANDBOX_ENV,
    SandboxConfig,
    SandboxError,
    SandboxMode,
    SandboxPolicy,
)

__all__ = [
    "PERMISSION_REFUSED",
    "PROTECTED_NAMES",
    "SANDBOX_ENV",
    "PermissionPolicy",
    "PermissionsConfig",
    "SandboxConfig",
    "SandboxError",
    "SandboxMode",
    "SandboxPolicy",
]
