"""Confinement: every path a file tool touches resolves inside one root directory.

A path from the model is taken relative to the root (an absolute path as it is),
then resolved with :func:`os.path.realpath`: ``..`` segments and every symlink on
the way (a link to a file, a link to a directory, a link in the middle of the path,
a dangling link) are followed before the check. Only a result equal to the root or
below it is accepted; anything else is refused with :class:`OutsideRoot`, whose
message names the path and the root.

Directory walks (``glob``, ``grep``) do not follow symlinked directories, and skip
symlinked files that resolve outside the root.

The check is made when the call runs; a process that swaps a directory for a
symlink between the check and the use is outside what this guards against (the
shell tool, which is not confined, needs approval by default for that reason).
"""

from __future__ import annotations

import os

from dsh.core import DshError

__all__ = ["FsError", "OutsideRoot", "Root"]


class FsError(DshError):
    """A file tool call failed in a way the model should be told about."""


class OutsideRoot(FsError):
    """A path resolves outside the root directory."""


class Root:
    """The directory a call is confined to (already resolved)."""

    __slots__ = ("path",)

    def __init__(self, directory: str) -> None:
        real = os.path.realpath(directory)
        if not os.path.isdir(real):
            raise FsError(f"the working directory {directory} does not exist or is not a directory")
        self.path = real

    def contains(self, real: str) -> bool:
        """True if the resolved path ``real`` is the root or below it."""
        if real == self.path:
            return True
        base = self.path if self.path.endswith(os.sep) else self.path + os.sep
        return real.startswith(base)

    def resolve(self, path: str) -> str:
        """The real path of ``path`` (relative to the root), refused if outside."""
        if "\0" in path:
            raise FsError(f"invalid path {path!r}: it contains a NUL character")
        if not path.strip():
            path = "."
        joined = path if os.path.isabs(path) else os.path.join(self.path, path)
        real = os.path.realpath(joined)
        if self.contains(real):
            return real
        lexical = os.path.normpath(joined)
        if self.contains(lexical):
            raise OutsideRoot(
                f'path "{path}" is refused: it resolves through a symlink to {real}, outside'
                f" the working directory {self.path} (file tools are confined to it)"
            )
        raise OutsideRoot(
            f'path "{path}" is refused: it is outside the working directory {self.path}'
            " (file tools are confined to it; use a path relative to it)"
        )

    def relative(self, real: str) -> str:
        """How outputs name the resolved path ``real``: relative to the root."""
        if real == self.path:
            return "."
        return os.path.relpath(real, self.path)

    def __repr__(self) -> str:
        return f"<Root {self.path}>"
