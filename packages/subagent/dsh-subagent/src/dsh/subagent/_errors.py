"""The subagent error tree: one class per way a request is refused, each with its code.

Every error is a :class:`SubagentError` (itself a :class:`dsh.core.DshError`) and
keeps its ``code`` string, so both styles work::

    except UnsupportedCapability: ...
    except SubagentError as err:
        if err.code == "UNSUPPORTED_CAPABILITY": ...
"""

from __future__ import annotations

from typing import ClassVar, Literal

from dsh.core import DshError

__all__ = [
    "CapacityExceeded",
    "ContinuationError",
    "ContinuationUnavailable",
    "DepthExceeded",
    "Draining",
    "DuplicateChild",
    "DuplicateProvider",
    "InvalidRequest",
    "NotResumable",
    "ProviderNotFound",
    "StartAborted",
    "StartFailed",
    "SubagentError",
    "SubagentErrorCode",
    "Unauthorized",
    "UnsupportedCapability",
]

SubagentErrorCode = Literal[
    "DUPLICATE_PROVIDER",
    "NO_PROVIDER",
    "UNSUPPORTED_CAPABILITY",
    "INVALID_REQUEST",
    "DEPTH_EXCEEDED",
    "CAPACITY_EXCEEDED",
    "ABORTED",
    "START_FAILED",
    "CONTINUATION_UNAVAILABLE",
    "DUPLICATE_CHILD",
    "NOT_RESUMABLE",
    "UNAUTHORIZED",
    "DRAINING",
]


class SubagentError(DshError):
    """A subagent request was refused or could not start; ``code`` says which way.

    Raise the subclass for the code (``StartFailed("...")``); ``SubagentError(message,
    code)`` is for codes a third-party provider adds. ``str(err)`` is the message.
    """

    default_code: ClassVar[SubagentErrorCode | None] = None

    def __init__(self, message: str, code: SubagentErrorCode | None = None) -> None:
        resolved = code or self.default_code
        if resolved is None:
            raise TypeError(f"{type(self).__name__} needs a code")
        super().__init__(message)
        self.message = message
        self.code: SubagentErrorCode = resolved

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), self.message, self.code))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, code={self.code!r})"


def _rebuild(cls: type[SubagentError], message: str, code: SubagentErrorCode) -> SubagentError:
    error = cls.__new__(cls)
    SubagentError.__init__(error, message, code)
    return error


class ProviderNotFound(SubagentError):
    """No provider is registered under the requested name (``NO_PROVIDER``)."""

    default_code = "NO_PROVIDER"


class DuplicateProvider(SubagentError):
    """A provider with that name is already registered (``DUPLICATE_PROVIDER``)."""

    default_code = "DUPLICATE_PROVIDER"


class UnsupportedCapability(SubagentError):
    """The request needs a capability the provider lacks (``UNSUPPORTED_CAPABILITY``)."""

    default_code = "UNSUPPORTED_CAPABILITY"


class InvalidRequest(SubagentError):
    """A request field, or the provider's configuration for it, is invalid (``INVALID_REQUEST``)."""

    default_code = "INVALID_REQUEST"


class DepthExceeded(SubagentError):
    """The child would be deeper than ``max_depth`` allows (``DEPTH_EXCEEDED``)."""

    default_code = "DEPTH_EXCEEDED"


class CapacityExceeded(SubagentError):
    """A limit on how many children may exist was reached (``CAPACITY_EXCEEDED``)."""

    default_code = "CAPACITY_EXCEEDED"


class StartFailed(SubagentError):
    """The child could not be started (``START_FAILED``); nothing is left running."""

    default_code = "START_FAILED"


class StartAborted(SubagentError):
    """The request's signal fired before the run was published (``ABORTED``)."""

    default_code = "ABORTED"


class Draining(SubagentError):
    """The runtime (or the agent) is shutting down (``DRAINING``)."""

    default_code = "DRAINING"


class ContinuationError(SubagentError):
    """Base of the errors of continuable children (send, interrupt, resume, report)."""


class ContinuationUnavailable(ContinuationError):
    """The provider or the child cannot be continued (``CONTINUATION_UNAVAILABLE``)."""

    default_code = "CONTINUATION_UNAVAILABLE"


class DuplicateChild(ContinuationError):
    """The continuable child is already active elsewhere (``DUPLICATE_CHILD``)."""

    default_code = "DUPLICATE_CHILD"


class NotResumable(ContinuationError):
    """The child's session cannot be resumed (``NOT_RESUMABLE``)."""

    default_code = "NOT_RESUMABLE"


class Unauthorized(ContinuationError):
    """The caller may not act on that child (``UNAUTHORIZED``)."""

    default_code = "UNAUTHORIZED"
