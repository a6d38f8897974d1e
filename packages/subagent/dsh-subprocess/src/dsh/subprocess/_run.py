"""``SubprocessRun``: the provider kit's :class:`~dsh.subagent.kit.RemoteRun` for a
child that is a local process.

The child runs in the delegating agent's sandbox (:func:`provider_sandbox`): the
agent's :class:`~dsh.core.permissions.SandboxPolicy` narrowed by the row's ``sandbox``, with the
network kept (the child must reach its model) and the product's state directories
writable. A dsh child gets the policy in ``DSH_SANDBOX`` and applies it to its own
tools; a provider whose product has a sandbox of its own maps the policy onto it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from dsh.core.permissions import SandboxPolicy
from dsh.core.tracing import TRACING_SWITCH_ENV
from dsh.subagent import StartFailed, SubagentStartRequest
from dsh.subagent.kit import TAPE_PROXY_VARIABLE, Lineage, RemoteRun
from dsh.subprocess._config import SubprocessConfig
from dsh.subprocess._cwd import resolve_child_cwd
from dsh.subprocess._env import scrubbed_env
from dsh.subprocess._errors import ProcessStartError
from dsh.subprocess._pool import ProcessPool
from dsh.subprocess._process import ChildProcess
from dsh.subprocess._sandbox import Sandbox, SandboxUnavailableError
from dsh.subprocess._supervisor import RunTag

__all__ = ["SubprocessRun", "provider_env", "provider_sandbox"]


def provider_env(
    config: SubprocessConfig,
    extra: Mapping[str, str] | None = None,
    *,
    lineage: Mapping[str, str] | None = None,
    telemetry: bool = False,
) -> dict[str, str]:
    """The environment of a process of a provider configured by ``config`` (later wins):
    the scrubbed environment with ``passthrough_env`` and the run's tape
    (``DSH_TAPE_PROXY``, when one is active: the child and its own children record or
    replay through it, see :func:`dsh.subagent.kit.taped_url`), with ``telemetry`` this
    process's ``OTEL_*`` variables and ``DSH_OTEL`` (tracing is on: the child exports to
    the same place), ``lineage`` (a run's depth variables), ``extra`` (the transport's defaults),
    the config's ``env``. Without ``lineage`` it is the same for every run: what a
    pooled process gets."""
    env = scrubbed_env(passthrough=(*config.passthrough_env, TAPE_PROXY_VARIABLE))
    if telemetry:
        env.update(
            (name, value)
            for name, value in os.environ.items()
            if name.startswith("OTEL_") or name == TRACING_SWITCH_ENV
        )
    if lineage:
        env.update(lineage)
    if extra:
        env.update(extra)
    env.update(config.env)
    return env


def provider_sandbox(
    config: SubprocessConfig, ceiling: SandboxPolicy, env: Mapping[str, str]
) -> Sandbox:
    """The sandbox of a provider's child process: ``ceiling`` (the delegating agent's
    policy; the context's for a warm pool) narrowed by the row's ``sandbox``, the
    network shared (the child reaches its model; ``policy.network`` travels on to its
    tools), and :meth:`~SubprocessConfig.writable_state` for ``env`` writable (created
    here when missing: bubblewrap binds existing directories only)."""
    policy = config.sandbox_policy(ceiling)
    state = tuple(os.path.realpath(d) for d in config.writable_state(env))
    if policy.enabled:
        for directory in state:
            try:
                os.makedirs(directory, mode=0o700, exist_ok=True)
            except OSError as exc:
                raise ProcessStartError(
                    f"cannot create {directory!r}, a state directory of the child that its"
                    f" sandbox keeps writable: {exc.strerror or exc}"
                ) from exc
    return Sandbox(policy, share_network=True, extra_writable=state)


def _same_sandbox(a: Sandbox, a_cwd: str, b: Sandbox, b_cwd: str) -> bool:
    """Whether processes in ``a_cwd`` under ``a`` and in ``b_cwd`` under ``b`` are confined
    alike (the same writable directories, protected paths, network, state)."""
    return (
        a.policy.pinned(a_cwd) == b.policy.pinned(b_cwd)
        and a.share_network == b.share_network
        and a.extra_writable == b.extra_writable
        and a.allow_write == b.allow_write
    )


class SubprocessRun(RemoteRun):
    """A :class:`~dsh.subagent.kit.RemoteRun` whose child is one local process tree.

    Call :meth:`spawn` from ``open``; :meth:`close` tears the tree down (stdin EOF,
    ``eof_grace``, SIGTERM to the group, ``term_grace``, SIGKILL, the run tag swept)
    and failed runs get the child's stderr tail in their diagnostic. The child's
    environment is scrubbed of credentials, plus ``passthrough_env``, the config's
    ``env``, the delegation depth and limit (:class:`~dsh.subagent.kit.Lineage`) and
    the run tag that lets teardown (and the watchdog) find every process of it.
    """

    def __init__(
        self, provider: str, request: SubagentStartRequest, config: SubprocessConfig
    ) -> None:
        super().__init__(provider, request, config)
        self.config = config
        self.child: ChildProcess | None = None
        self.tag = RunTag()
        self.lineage = Lineage.of_request(request)
        self.passes_telemetry = False
        """Pass ``OTEL_*`` and ``DSH_OTEL`` to the child while the parent traces (a child
        that turns tracing on with them: ``dsh acp``)."""
        self._cwd: str | None = None

    @property
    def cwd(self) -> str:
        """The child's working directory: config ``cwd``, else the parent session's
        (checked; raises :class:`~dsh.subagent.InvalidRequest`)."""
        if self._cwd is None:
            self._cwd = resolve_child_cwd(
                self.config.cwd, self.request.parent, provider=self.provider
            )
        return self._cwd

    def child_env(
        self, extra: Mapping[str, str] | None = None, *, lineage: bool = True
    ) -> dict[str, str]:
        """The child's whole environment, in this order (later wins): the scrubbed
        environment with ``passthrough_env``, the depth and limit (unless ``lineage`` is
        False: a pooled process serves runs of any depth, which then travels in the
        protocol instead), ``extra`` (the transport's defaults), the config's ``env``.
        The run tag is added at spawn."""
        return provider_env(
            self.config,
            extra,
            lineage=self.lineage.env() if lineage else None,
            telemetry=self.passes_telemetry and self.request.parent.ctx.tracing.enabled,
        )

    @property
    def policy(self) -> SandboxPolicy:
        """The delegating agent's sandbox policy narrowed by the row's ``sandbox``."""
        return self.config.sandbox_policy(self.request.parent.sandbox)

    def sandbox_for(self, env: Mapping[str, str]) -> Sandbox:
        """The sandbox of this run's child with environment ``env``
        (:func:`provider_sandbox` under the delegating agent's policy)."""
        return provider_sandbox(self.config, self.request.parent.sandbox, env)

    def usable_pool(self, pool: ProcessPool[Any] | None, env: Mapping[str, str]) -> bool:
        """Whether this run may take a process of ``pool``, given the environment
        ``env`` its own process would get (without lineage): the same environment, and
        the same confinement in this run's cwd as the pool's processes have in theirs.
        A parent with a narrower sandbox (or another cwd) gets a process of its own:
        a pooled process was started with the pool's policy, and would reach further."""
        if pool is None or dict(env) != pool.env:
            return False
        if pool.sandbox is None:
            return not self.policy.enabled
        return _same_sandbox(self.sandbox_for(env), self.cwd, pool.sandbox, pool.cwd)

    async def spawn(
        self,
        argv: Sequence[str] | None = None,
        *,
        what: str | None = None,
        env: Mapping[str, str] | None = None,
        hint: str = "",
    ) -> ChildProcess:
        """Start the child (default argv: the config's ``command`` and ``args``; default
        env: :meth:`child_env`) in its sandbox (:meth:`sandbox_for`). A command that
        cannot start, or a sandbox that cannot, raises :class:`~dsh.subagent.StartFailed`
        (with ``hint`` appended)."""
        command = list(argv) if argv is not None else self.config.argv
        env = env if env is not None else self.child_env()
        try:
            self.child = await ChildProcess.start(
                command,
                env=env,
                cwd=self.cwd,
                what=what or f"{self.provider} child",
                tag=self.tag,
                sandbox=self.sandbox_for(env),
            )
        except ProcessStartError as exc:
            message = str(exc)
            if hint and not isinstance(exc, SandboxUnavailableError):
                message = f"{message}; {hint}"
            raise StartFailed(message) from exc
        return self.child

    async def close(self) -> None:
        """Tear the process tree down (bounded; see the class docstring). A start that
        failed or was aborted skips ``eof_grace``: the child is SIGTERMed at once."""
        if self.child is not None:
            await self.child.terminate(
                eof_grace=self.config.eof_grace if self.published else 0.0,
                term_grace=self.config.term_grace,
            )

    def kill_now(self) -> None:
        """SIGKILL the group and have the watchdog sweep the tag (synchronous)."""
        if self.child is not None:
            self.child.kill_tree()

    def details(self) -> str:
        """The child's stderr tail, if it wrote anything."""
        if self.child is None:
            return ""
        tail = self.child.stderr_tail.text(1500)
        return f"{self.provider} stderr (last lines):\n{tail}" if tail else ""
