"""The result store: where bodies too large for a workflow history travel.

Temporal refuses payloads over 2 MB and every byte of a history is replayed, so a
result (or a prompt) over the inline limit (256 KiB by default) is written here by
whoever produced it and only a :class:`~._spec.BlobRef` (key, size, SHA-256) goes
through Temporal. Parents and workers must be configured with the same store.

Built in: a directory (``file:///shared/dsh-results`` or an absolute path), on a
file system every parent and worker mounts (NFS, EFS, SMB...; a local directory
when they share one host). Anything else (an object store) is a
:class:`ResultStore` you write, named as ``module:attribute`` (a callable that
returns the store, or the store itself).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import os
import tempfile
import time
from pathlib import Path
from typing import Protocol, runtime_checkable
from urllib.parse import unquote, urlparse

import anyio

from dsh.core import DshError
from dsh.subagent_temporal._spec import BlobRef

__all__ = [
    "DirectoryResultStore",
    "ResultStore",
    "StoreError",
    "open_store",
    "read_blob",
    "write_blob",
]


class StoreError(DshError):
    """A body could not be written, found or verified."""


@runtime_checkable
class ResultStore(Protocol):
    """Somewhere every parent and worker of a task queue can put and get bytes."""

    description: str
    """Where it is (for messages)."""

    async def put(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key`` (replacing what was there)."""
        ...

    async def get(self, key: str) -> bytes:
        """The bytes under ``key`` (:class:`StoreError` if there are none)."""
        ...

    async def delete(self, key: str) -> None:
        """Forget ``key`` (no error if it is gone)."""
        ...


class DirectoryResultStore:
    """A :class:`ResultStore` in a directory (shared between hosts by the file system).

    Writes go to a temporary file renamed into place, so a reader never sees half a
    body; file work runs in worker threads."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory).expanduser()
        if not self.directory.is_absolute():
            raise ValueError(f"the result store directory must be absolute, got {directory}")
        self.description = f"file://{self.directory}"

    def _path(self, key: str) -> Path:
        parts = key.split("/")
        if not key or any(part in ("", ".", "..") for part in parts) or "\\" in key:
            raise StoreError(f"invalid result store key {key!r}")
        return self.directory.joinpath(*parts)

    async def put(self, key: str, data: bytes) -> None:
        """Write ``data`` atomically (temporary file, fsync, rename)."""
        await anyio.to_thread.run_sync(self._put, self._path(key), data)

    @staticmethod
    def _put(path: Path, data: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise

    async def get(self, key: str) -> bytes:
        """Read the body under ``key``."""
        path = self._path(key)
        try:
            return await anyio.to_thread.run_sync(path.read_bytes)
        except FileNotFoundError:
            raise StoreError(f"nothing under {key!r} in {self.description}") from None

    async def delete(self, key: str) -> None:
        """Remove ``key`` (and its run's folder once empty)."""
        await anyio.to_thread.run_sync(self._delete, self._path(key))

    def _delete(self, path: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        with contextlib.suppress(OSError):
            if path.parent != self.directory:
                path.parent.rmdir()  # only when empty

    def prune(self, older_than: float) -> int:
        """Remove bodies not touched for ``older_than`` seconds (their parent never
        collected them); returns how many (blocking)."""
        if not self.directory.is_dir():
            return 0
        limit = time.time() - older_than
        removed = 0
        for path in self.directory.rglob("*"):
            with contextlib.suppress(OSError):
                if path.is_file() and path.stat().st_mtime < limit:
                    path.unlink()
                    removed += 1
        for folder in sorted(self.directory.glob("*"), reverse=True):
            with contextlib.suppress(OSError):
                if folder.is_dir():
                    folder.rmdir()
        return removed

    def __repr__(self) -> str:
        return f"<DirectoryResultStore {self.directory}>"


def open_store(spec: str | None) -> ResultStore | None:
    """The store a configuration string names: ``file:///dir``, an absolute path, or
    ``module:attribute``; None for None or ""."""
    if not spec:
        return None
    if spec.startswith("file:"):
        parsed = urlparse(spec)
        if parsed.netloc not in ("", "localhost"):
            raise ValueError(f"result store {spec!r}: only local file URLs (file:///dir)")
        return DirectoryResultStore(unquote(parsed.path))
    if spec.startswith(("/", "~")):
        return DirectoryResultStore(spec)
    module, _, attribute = spec.partition(":")
    if not module or not attribute:
        raise ValueError(
            f"result store {spec!r}: expected file:///dir, an absolute path or module:attribute"
        )
    target: object = importlib.import_module(module)
    for part in attribute.split("."):
        target = getattr(target, part)
    store = target() if callable(target) and not isinstance(target, ResultStore) else target
    if not isinstance(store, ResultStore):
        raise ValueError(f"result store {spec!r} is a {type(store).__name__}, not a ResultStore")
    return store


async def write_blob(store: ResultStore, key: str, data: bytes) -> BlobRef:
    """Put ``data`` and return the reference that travels instead."""
    await store.put(key, data)
    return BlobRef(key, len(data), hashlib.sha256(data).hexdigest())


async def read_blob(store: ResultStore, ref: BlobRef) -> bytes:
    """Get a body and check it is the one the reference names."""
    data = await store.get(ref.key)
    if len(data) != ref.size or hashlib.sha256(data).hexdigest() != ref.sha256:
        raise StoreError(
            f"the body under {ref.key!r} in {store.description} is not the one referenced"
            f" ({len(data)} bytes, expected {ref.size})"
        )
    return data
