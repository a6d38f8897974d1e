"""Session modes: put the agent in a mode that asks before it acts.

An agent answers the client's permission policy only for the tool calls it asks
about; in a mode that approves its own calls (claude-agent-acp's ``auto``, which it
starts in by default, or ``bypassPermissions``) ``permission = "reject"`` binds
nothing. So after ``session/new`` the run reads the session's modes (ACP
``SessionModeState``: ``currentModeId``, ``availableModes``) and, where the row
wants a mode (``session_mode``, or under ``reject`` one that asks), selects it with
``session/set_mode``. When the agent does not confirm it, the row's
``on_unconfirmed`` policy refuses the run or warns and goes on.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from dsh.subagent import StartFailed
from dsh.subagent.kit import Stages
from dsh.subagent_acp._config import AcpProviderConfig
from dsh.subagent_acp._connection import AcpConnection, LinkError

__all__ = ["ASKING_MODES", "ModeState", "select_mode"]

_log = logging.getLogger("dsh.subagent_acp")

ASKING_MODES = ("default", "read-only")
"""Mode ids known to ask before acting, in order of preference: ``default``
(claude-agent-acp's "Manual", Gemini CLI, Qwen Code), ``read-only`` (codex-acp)."""


@dataclass(frozen=True)
class ModeState:
    """The session's modes as ``session/new`` reported them."""

    current: str | None
    available: tuple[str, ...]

    @classmethod
    def of(cls, session: Any) -> ModeState | None:
        """The ``modes`` of a ``session/new`` answer; None when it has none (or they
        are malformed)."""
        modes = session.get("modes") if isinstance(session, dict) else None
        if not isinstance(modes, dict):
            return None
        listed = modes.get("availableModes")
        available = tuple(
            mode["id"]
            for mode in (listed if isinstance(listed, list) else [])
            if isinstance(mode, dict) and isinstance(mode.get("id"), str)
        )
        current = modes.get("currentModeId")
        if not available and not isinstance(current, str):
            return None
        return cls(current if isinstance(current, str) else None, available)

    def describe(self) -> str:
        """``offered: a, b; current: c`` (for diagnostics)."""
        offered = ", ".join(self.available) or "none"
        return f"offered: {offered}; current: {self.current or 'unknown'}"


async def select_mode(
    conn: AcpConnection,
    session_id: str,
    session: Any,
    config: AcpProviderConfig,
    stages: Stages,
) -> tuple[str | None, str | None]:
    """Put the session in the row's mode; returns ``(mode, warning)``: the mode the
    agent is confirmed in (None: not known), and what ``warn`` logged (None: nothing).

    Raises :class:`~dsh.subagent.StartFailed` when the agent does not confirm the
    mode and the row's policy is ``refuse``.
    """
    state = ModeState.of(session)
    wanted = config.session_mode
    if wanted is None and config.permission == "allow":
        return (state.current if state else None), None  # the agent's own mode
    if state is None:
        if wanted is None:
            return None, None  # a mode-less agent: nothing to select (see the docs)
        return None, _unconfirmed(
            config,
            stages,
            f"session/new reported no session modes, so the agent cannot"
            f" confirm session_mode = {wanted!r}",
        )
    if wanted is None:
        if state.current in ASKING_MODES:
            return state.current, None
        wanted = next((mode for mode in ASKING_MODES if mode in state.available), None)
        if wanted is None:
            return None, _unconfirmed(
                config,
                stages,
                f"the agent offers no mode known to ask before acting"
                f" ({', '.join(ASKING_MODES)}) ({state.describe()})",
                state,
            )
    if wanted == state.current:
        return wanted, None
    if wanted not in state.available:
        return None, _unconfirmed(
            config, stages, f"the agent does not offer mode {wanted!r} ({state.describe()})", state
        )
    stages.enter("session/set_mode")
    try:
        await conn.request("session/set_mode", {"sessionId": session_id, "modeId": wanted})
    except LinkError as exc:
        if exc.kind != "refused":
            raise
        return None, _unconfirmed(
            config, stages, f"{exc.message} ({state.describe()})", state, asked=wanted
        )
    return wanted, None


def _unconfirmed(
    config: AcpProviderConfig,
    stages: Stages,
    problem: str,
    state: ModeState | None = None,
    *,
    asked: str | None = None,
) -> str:
    """Refuse (raise) or warn (log, return the warning) by the row's policy."""
    current = state.current if state is not None and state.current else None
    own = f"its own mode ({current})" if current else "its own mode"
    if config.permission == "reject":
        risk = (
            f'with permission = "reject" the agent in {own} may approve its own tool calls'
            " without asking"
        )
    else:
        risk = f"the agent runs in {own}"
    subject = f"{stages.provider} session/set_mode"
    if asked is None and config.session_mode is None:
        fix = "set session_mode to the agent's mode that asks before acting"
    else:
        fix = "set session_mode to a mode the agent offers and accepts"
    if config.unconfirmed_policy == "refuse":
        raise StartFailed(
            f"{subject}: {problem}; {risk}, so the run is refused."
            f' Fix: {fix}, or set on_unconfirmed = "warn" to run it anyway'
        )
    warning = f'{subject}: {problem}; {risk} (on_unconfirmed = "warn": running anyway)'
    _log.warning("%s", warning)
    return warning
