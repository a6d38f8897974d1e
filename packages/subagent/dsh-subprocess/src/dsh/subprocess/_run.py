"""``SubprocessRun``: the provider kit's :class:`~dsh.subagent.kit.RemoteRun` for a
child that is a local process."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dsh.subagent import StartFailed, SubagentStartRequest
from dsh.subagent.kit import Lineage, RemoteRun
from dsh.subprocess._config import SubprocessConfig
from dsh.subprocess._cwd import resolve_child_cwd
from dsh.subprocess._env import scrubbed_env
from dsh.subprocess._errors import ProcessStartError
from dsh.subprocess._process import ChildProcess
from dsh.subprocess._supervisor import RunTag

__all__ = ["SubprocessRun", "provider_env"]


def provider_env(
    config: SubprocessConfig,
    extra: Mapping[str, str] | None = None,
    *,
    lineage: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment of a process of a provider configured by ``config`` (later wins):
    the scrubbed environment with ``passthrough_env``, ``lineage`` (a run's depth
    variables), ``extra`` (the transport's defaults), the config's ``env``. Without
    ``lineage`` it is the same for every run: what a pooled process gets."""
    env = scrubbed_env(passthrough=config.passthrough_env)
    if lineage:
        env.update(lineage)
    if extra:
        env.update(extra)
    env.update(config.env)
    return env


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
        return provider_env(self.config, extra, lineage=self.lineage.env() if lineage else None)

    async def spawn(
        self,
        argv: Sequence[str] | None = None,
        *,
        what: str | None = None,
        env: Mapping[str, str] | None = None,
        hint: str = "",
    ) -> ChildProcess:
        """Start the child (default argv: the config's ``command`` and ``args``; default
        env: :meth:`child_env`). A command that cannot start raises
        :class:`~dsh.subagent.StartFailed` (with ``hint`` appended)."""
        command = list(argv) if argv is not None else self.config.argv
        try:
            self.child = await ChildProcess.start(
                command,
                env=env if env is not None else self.child_env(),
                cwd=self.cwd,
                what=what or f"{self.provider} child",
                tag=self.tag,
            )
        except ProcessStartError as exc:
            message = str(exc)
            raise StartFailed(f"{message}; {hint}" if hint else message) from exc
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
