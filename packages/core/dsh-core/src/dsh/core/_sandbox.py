"""The sandbox policy: what the processes a tool starts may write and reach.

A :class:`SandboxPolicy` says how far tools reach; ``dsh.subprocess`` turns it into a
bubblewrap command line for every process a tool starts (shell commands, stdio MCP
servers, agent processes), and the file tools check writes against it. Modes, as
Codex names them:

* ``read-only`` — nothing is writable;
* ``workspace-write`` (the default) — the working directory, the ``writable_roots``
  and the temporary directory are writable, the rest of the file system read-only;
* ``off`` — no sandbox (only when a preset says so explicitly).

The network is off unless ``network = true``. Whatever the mode, the protected paths
stay read-only: ``.git`` and ``.dsh`` in every writable directory and every preset
file the context loaded, unless a tool row allows a path explicitly.

Policies only narrow: a child agent's policy is its parent's narrowed by the
delegating row (:meth:`SandboxPolicy.narrowed`); a row that asks for more than its
parent has fails loud (``strict``); a policy inherited from a parent process
(:data:`SANDBOX_ENV`) clamps the child's own preset silently, since the parent's
ceiling is the point. The preset's table::

    [sandbox]
    mode = "workspace-write"      # "read-only", "workspace-write" or "off"
    network = false
    writable_roots = ["/home/me/.cache/pip"]
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import PurePath
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, field_validator

from dsh.core._errors import DshError

__all__ = [
    "PROTECTED_NAMES",
    "SANDBOX_ENV",
    "SandboxConfig",
    "SandboxError",
    "SandboxMode",
    "SandboxPolicy",
]

_T = TypeVar("_T")

SandboxMode = Literal["read-only", "workspace-write", "off"]
_WIDTH: dict[str, int] = {"read-only": 0, "workspace-write": 1, "off": 2}

PROTECTED_NAMES = (".git", ".dsh")
"""Names kept read-only in every writable directory (and refused by the file tools
anywhere in a path): a ``.git/config`` ``fsmonitor`` line or a hook runs commands on
the next ``git status``; ``.dsh`` holds dsh's own state."""

SANDBOX_ENV = "DSH_SANDBOX"
"""The environment variable a parent dsh process sets for a child dsh process: the
parent's policy (JSON), which the child's own preset can only narrow."""


class SandboxError(DshError):
    """A sandbox request is wider than what its parent has, or is malformed."""


class SandboxConfig(BaseModel):
    """The preset's ``[sandbox]`` table, and ``sandbox = {...}`` on a tool row (which
    may only narrow what the agent has). Unset keys keep the parent's value."""

    model_config = ConfigDict(extra="forbid")

    mode: SandboxMode | None = None
    """``read-only``, ``workspace-write`` (default) or ``off``."""
    network: bool | None = None
    """Whether tool processes reach the network (default: no)."""
    writable_roots: list[str] | None = None
    """Absolute directories writable besides the working directory (workspace-write)."""

    @field_validator("writable_roots")
    @classmethod
    def _absolute(cls, value: list[str] | None) -> list[str] | None:
        for root in value or ():
            if not os.path.isabs(root):
                raise ValueError(f"writable_roots must be absolute paths, got {root!r}")
        return value


@dataclass(frozen=True, slots=True)
class _Writable:
    """One layer of the writable set: the working directory (when ``cwd``), ``roots``."""

    cwd: bool
    roots: tuple[str, ...]

    def dirs(self, cwd: str) -> tuple[str, ...]:
        return ((cwd,) if self.cwd else ()) + self.roots


@dataclass(frozen=True, slots=True)
class SandboxPolicy:
    """How far the processes of a tool reach; narrowed on the way down a delegation tree.

    Build one with :meth:`from_config` (a preset's ``[sandbox]``) and narrow it with
    :meth:`narrowed`; :meth:`writable_dirs` and :meth:`write_refusal` evaluate it for a
    working directory."""

    mode: SandboxMode = "workspace-write"
    network: bool = False
    protected: tuple[str, ...] = ()
    """Absolute paths kept read-only whatever the mode (the preset files loaded)."""
    layers: tuple[_Writable, ...] = field(default=(_Writable(True, ()),))
    """Writable sets, one per narrowing; what is writable is in every one of them."""

    @classmethod
    def from_config(
        cls, config: SandboxConfig | None = None, *, protected: Iterable[str] = ()
    ) -> SandboxPolicy:
        """The root policy of a context: the defaults with ``config`` on top."""
        config = config or SandboxConfig()
        return cls(
            mode=config.mode or "workspace-write",
            network=bool(config.network),
            protected=_unique(_real(p) for p in protected),
            layers=(_Writable(True, tuple(_real(r) for r in config.writable_roots or ())),),
        )

    @property
    def enabled(self) -> bool:
        """False only for mode ``off``."""
        return self.mode != "off"

    def narrowed(
        self,
        config: SandboxConfig | SandboxPolicy | None,
        *,
        strict: bool = True,
        what: str = "this row",
        protected: Iterable[str] = (),
    ) -> SandboxPolicy:
        """This policy narrowed by ``config`` (a row's table, or another policy).

        ``strict``: a ``config`` that asks for a wider mode or for the network this policy
        does not have raises :class:`SandboxError` naming ``what``; otherwise it is
        clamped to this policy."""
        extra = tuple(_real(p) for p in protected) if protected else ()
        if config is None:
            return replace(self, protected=_unique((*self.protected, *extra))) if extra else self
        mode: SandboxMode | None = config.mode
        network: bool | None = config.network
        if isinstance(config, SandboxPolicy):
            layers, extra = config.layers, (*extra, *config.protected)
        else:
            layers = (
                (_Writable(True, tuple(_real(r) for r in config.writable_roots)),)
                if config.writable_roots is not None
                else ()
            )
        if strict and mode is not None and _WIDTH[mode] > _WIDTH[self.mode]:
            raise SandboxError(
                f'{what} asks for sandbox mode "{mode}", wider than the "{self.mode}" it'
                " has; a child can only narrow its parent's sandbox (set it in the parent's"
                " [sandbox] table instead)"
            )
        if strict and network and not self.network:
            raise SandboxError(
                f"{what} asks for network = true, but its parent's sandbox has the network"
                " off; a child can only narrow its parent's sandbox (set network = true in"
                " the preset's [sandbox] table to allow it)"
            )
        narrow_mode = self.mode if mode is None or _WIDTH[mode] > _WIDTH[self.mode] else mode
        return SandboxPolicy(
            mode=narrow_mode,
            network=self.network and (network if network is not None else True),
            protected=_unique((*self.protected, *extra)),
            layers=_unique((*self.layers, *layers)),
        )

    def writable_dirs(self, cwd: str) -> tuple[str, ...]:
        """The directories writable for a process working in ``cwd`` (besides the
        temporary directory): none for ``read-only``; for ``off`` just ``/``."""
        if self.mode == "read-only":
            return ()
        if self.mode == "off":
            return ("/",)
        cwd = _real(cwd)
        dirs = self.layers[0].dirs(cwd) if self.layers else (cwd,)
        for layer in self.layers[1:]:
            dirs = _intersect(dirs, layer.dirs(cwd))
        return _unique(dirs)

    def bind_dirs(self, cwd: str, extra: Iterable[str] = ()) -> tuple[str, ...]:
        """The writable directories to mount for a process working in ``cwd``:
        :meth:`writable_dirs`, plus ``extra`` (absolute) in ``workspace-write`` mode,
        without those inside another (mounting both is redundant), in order."""
        dirs = [*self.writable_dirs(cwd)]
        if self.mode == "workspace-write":
            dirs += (os.path.realpath(d) for d in extra)
        unique = _unique(dirs)
        return tuple(d for d in unique if not any(o != d and _under(d, o) for o in unique))

    @staticmethod
    def inside(path: str, dirs: Iterable[str]) -> bool:
        """True when ``path`` is one of ``dirs`` or lies below one (``/`` holds every
        path); both absolute and already resolved, compared as text."""
        return any(_under(path, d) for d in dirs)

    def pinned(self, cwd: str) -> SandboxPolicy:
        """This policy with the writable set fixed to absolute directories (as evaluated
        in ``cwd``): what travels to a child process, whose working directory may
        differ."""
        if self.mode != "workspace-write":
            return replace(self, layers=())
        return replace(self, layers=(_Writable(False, self.writable_dirs(cwd)),))

    def write_refusal(self, path: str, *, cwd: str, allow: Iterable[str] = ()) -> str | None:
        """Why a write to ``path`` (absolute) is refused, or None when it is allowed.

        Refused: anything in ``read-only`` mode, a path outside the writable
        directories, and the protected paths (``.git``/``.dsh`` anywhere in the path,
        the preset files) unless under one of ``allow``."""
        if self.mode == "read-only":
            return 'the sandbox is read-only (sandbox mode "read-only")'
        real = _real(path)
        writable = self.writable_dirs(cwd)
        if self.mode == "workspace-write" and not self.inside(real, writable):
            return "it is outside the sandbox's writable directories"
        if self.inside(real, (_real(a) for a in allow)):
            return None
        # .git/.dsh below the directory the write lands in (a workspace that itself lies
        # under a .dsh folder is not protected from itself)
        base = max((d for d in (*writable, _real(cwd)) if _under(real, d)), key=len, default="/")
        names = set(PurePath(os.path.relpath(real, base)).parts)
        names |= set(PurePath(os.path.relpath(os.path.abspath(path), base)).parts)
        hit = next((n for n in PROTECTED_NAMES if n in names), None)
        if hit is not None:
            return f"{hit}/ is protected (a tool row can allow a path with allow_write)"
        if self.inside(real, self.protected):
            return "it is a preset file dsh loaded, which is protected"
        return None

    def to_json(self) -> str:
        """The policy as JSON (for :data:`SANDBOX_ENV`)."""
        return json.dumps(
            {
                "mode": self.mode,
                "network": self.network,
                "protected": list(self.protected),
                "layers": [{"cwd": w.cwd, "roots": list(w.roots)} for w in self.layers],
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> SandboxPolicy:
        """The policy :meth:`to_json` wrote; :class:`SandboxError` if malformed."""
        try:
            raw: Any = json.loads(text)
            mode = raw["mode"]
            if mode not in _WIDTH:
                raise ValueError(f"unknown mode {mode!r}")
            layers = tuple(
                _Writable(bool(w["cwd"]), tuple(str(r) for r in w["roots"])) for w in raw["layers"]
            )
            return cls(
                mode=mode,
                network=bool(raw["network"]),
                protected=tuple(str(p) for p in raw["protected"]),
                layers=layers,
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise SandboxError(f"{SANDBOX_ENV} holds no valid sandbox policy: {exc}") from None

    def describe(self) -> str:
        """One line for people: ``workspace-write, network off``."""
        return f"{self.mode}, network {'on' if self.network else 'off'}"


def _real(path: str) -> str:
    return os.path.realpath(os.path.expanduser(path))


def _under(path: str, root: str) -> bool:
    return root == "/" or path == root or path.startswith(root.rstrip("/") + "/")


def _intersect(left: Iterable[str], right: Iterable[str]) -> tuple[str, ...]:
    right = tuple(right)
    out: list[str] = []
    for a in left:
        for b in right:
            if _under(a, b):
                out.append(a)
            elif _under(b, a):
                out.append(b)
    return tuple(out)


def _unique(items: Iterable[_T]) -> tuple[_T, ...]:
    return tuple(dict.fromkeys(items))
