"""``CodexProvider``: the subagent provider named ``codex``."""

from __future__ import annotations

import os

from dsh.subagent import (
    NO_START_CAPABILITIES,
    SubagentCapabilities,
    SubagentError,
    SubagentRun,
    SubagentStartRequest,
)
from dsh.subagent.out_of_process import ChildProcess, resolve_child_cwd, scrubbed_env
from dsh.subagent_codex.config import CodexConfig
from dsh.subagent_codex.session import CodexSession

__all__ = ["CodexProvider"]

_INSTALL_HINT = (
    "install the Codex CLI (npm install -g @openai/codex, or tools/install-codex.sh in the dsh"
    " repository) or set `command` in the dsh-subagent-codex config to the codex executable"
)


class CodexProvider:
    """Runs each delegated task as a one-shot ``codex app-server`` child.

    One process per run: ``initialize``, an ephemeral thread in the child cwd
    (config ``cwd``, else the parent session's), one turn with the prompt, the
    last completed agent message as the output. No start capabilities: codex
    manages its own depth, tools and persona.
    """

    inherits_parent_context = False

    def __init__(self, config: CodexConfig | None = None) -> None:
        self.config = config or CodexConfig()
        self.name = self.config.name
        self.capabilities: SubagentCapabilities = NO_START_CAPABILITIES

    def child_env(self) -> dict[str, str]:
        """The child's environment: scrubbed, plus ``CODEX_HOME`` and config ``env``."""
        config = self.config
        extra: dict[str, str] = {"RUST_LOG": "warn"}
        if config.codex_home is not None:
            extra["CODEX_HOME"] = config.codex_home
        extra.update(config.env)
        return scrubbed_env(extra, passthrough=config.passthrough_env)

    async def start(self, request: SubagentStartRequest) -> SubagentRun:
        """Start ``codex app-server``, handshake, and publish the run.

        Raises ``ABORTED`` if the request's signal fires first, ``INVALID_REQUEST``
        for a prompt without text or an unusable cwd, ``START_FAILED`` when the
        process cannot start or the handshake fails; no process is left then.
        """
        if request.signal.aborted:
            raise SubagentError(f"subagent start aborted: {request.signal.reason}", "ABORTED")
        if not request.prompt_text.strip():
            raise SubagentError(
                f"{self.name} provider: the prompt has no text (codex takes text prompts only)",
                "INVALID_REQUEST",
            )
        config = self.config
        cwd = resolve_child_cwd(config.cwd, request.parent, provider=self.name)
        if config.codex_home is not None:
            try:
                os.makedirs(config.codex_home, exist_ok=True)
            except OSError as exc:
                raise SubagentError(
                    f"{self.name} provider: cannot create codex_home {config.codex_home!r}:"
                    f" {exc.strerror or exc}",
                    "START_FAILED",
                ) from exc
        try:
            # No PR_SET_PDEATHSIG (it needs a preexec_fn, which turns spawning into a full
            # fork of this process: 4-10 ms a run). Codex exits ~30 ms after stdin EOF in
            # any state and takes its tool processes with it, and our stdin pipe closes
            # when this process dies, however it dies (tested: test_parent_death.py).
            child = await ChildProcess.start(
                config.argv(),
                env=self.child_env(),
                cwd=cwd,
                what=f"{self.name} app-server",
                die_with_parent=False,
            )
        except SubagentError as exc:
            raise SubagentError(f"{exc.message}; {_INSTALL_HINT}", exc.code) from exc
        try:
            session = CodexSession(config, child, request, cwd)
        except BaseException:
            await child.terminate(eof_grace=0.5, term_grace=0.5)
            raise
        return await session.open()
