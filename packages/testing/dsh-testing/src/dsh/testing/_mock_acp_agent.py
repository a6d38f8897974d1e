"""The code behind :mod:`dsh.testing.mock_acp_agent` (its docstring says what it is)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from typing import Any

from acp import RequestError
from acp.schema import (
    AgentCapabilities,
    AllowedOutcome,
    PermissionOption,
    PromptResponse,
    SessionMode,
    SessionModeState,
    SetSessionModeResponse,
    ToolCallUpdate,
    Usage,
    UsageUpdate,
)

from dsh.acp import (
    PromptBlock,
    agent_message,
    serve_stdio,
    tool_call_progress,
    tool_call_start,
)
from dsh.testing._acp_test_agent import AcpTestAgent, prompt_text

__all__ = ["MODES", "MockAgent", "main"]

MODES = (
    "normal",
    "narrate",
    "hang",
    "ignore-cancel",
    "crash",
    "garbage",
    "permission",
    "ask-after-cancel",
    "huge",
    "slow-eof",
    "error",
    "exit-on-start",
    "bad-init",
    "slow-start",
    "inspect",
    "bad-error",
    "wrong-id",
    "partial-line",
    "notice",
    "by-prompt",
)


def write_raw(data: bytes) -> None:
    """Write straight to fd 1 (non-blocking under ``run_agent``: loop on partial writes)."""
    view = memoryview(data)
    while view:
        try:
            written = os.write(1, view)
        except BlockingIOError:
            time.sleep(0.001)
            continue
        view = view[written:]


class MockAgent(AcpTestAgent):
    """The scripted agent (see the module docstring); methods other than
    ``initialize``, ``session/new``, ``session/set_mode``, ``session/prompt`` and
    ``session/cancel`` answer "method not found" (:class:`~dsh.acp.AcpAgentBase`)."""

    agent_name = "dsh-mock-acp-agent"
    agent_version = "0.1.0"

    def __init__(self, options: argparse.Namespace) -> None:
        super().__init__()
        self.options = options
        if options.mode == "bad-init":
            self.protocol_version = 99
        self._modes: dict[str, str] = {}
        self._notices = False

    def capabilities(self) -> AgentCapabilities:
        """No ``loadSession``."""
        return AgentCapabilities(load_session=False)

    def new_session_id(self) -> str:
        """``mock-`` and a random hex id."""
        return f"mock-{uuid.uuid4().hex[:12]}"

    def session_modes(self, session_id: str) -> SessionModeState | None:
        """The ``--modes`` (current: ``--initial-mode``, else the last one)."""
        offered = [mode for mode in self.options.modes.split(",") if mode]
        if not offered:
            return None
        current = self._modes[session_id] = self.options.initial_mode or offered[-1]
        return SessionModeState(
            current_mode_id=current,
            available_modes=[SessionMode(id=mode, name=mode.capitalize()) for mode in offered],
        )

    async def set_session_mode(
        self, session_id: str, mode_id: str, **kwargs: Any
    ) -> SetSessionModeResponse | None:
        """Switch the session's mode (an error with ``--refuse-set-mode``, or for a mode
        not offered)."""
        if session_id not in self._modes:
            raise RequestError.method_not_found("session/set_mode")
        if self.options.refuse_set_mode:
            raise RequestError.internal_error({"details": "the mock agent refuses to switch modes"})
        if mode_id not in self.options.modes.split(","):
            raise RequestError.invalid_params({"details": f"Mode {mode_id} is not available"})
        self._modes[session_id] = mode_id
        return SetSessionModeResponse()

    def observe(self, message: dict[str, Any]) -> None:
        """Raw incoming messages: did the client declare ``session.notices``?"""
        if message.get("method") == "initialize":
            params = message.get("params") or {}
            session = (params.get("clientCapabilities") or {}).get("session") or {}
            self._notices = isinstance(session, dict) and "notices" in session

    async def prompt(
        self, session_id: str, prompt: list[PromptBlock], **kwargs: Any
    ) -> PromptResponse:
        """Answer by mode (``ignore-cancel`` never looks at ``session/cancel``)."""
        session = self.sessions.get(session_id)
        if session is None:
            raise RequestError.invalid_params({"sessionId": session_id, "details": "no session"})
        session.cancelled.clear()
        text = prompt_text(prompt)
        mode = self.options.mode
        if mode == "by-prompt":
            mode, _, text = text.partition(" ")
        return await self._answer(session_id, mode, text, session.cancelled)

    async def _answer(
        self, session_id: str, mode: str, text: str, cancelled: asyncio.Event
    ) -> PromptResponse:
        if mode in ("normal", "slow-eof", "garbage", "slow-start", "exit-on-start", "bad-init"):
            if mode == "garbage":
                write_raw(b"this is not json\n{broken\n")
            words = f"You said: {text}".split(" ")
            for index, word in enumerate(words):
                await self.say(session_id, word if index == 0 else f" {word}", "m1")
            usage = Usage(input_tokens=len(text.split()), output_tokens=len(words), total_tokens=0)
            usage.total_tokens = usage.input_tokens + usage.output_tokens
            return PromptResponse(stop_reason=self.options.stop_reason, usage=usage)
        if mode == "narrate":
            await self.say(session_id, "Let me look.", "m1")
            await self._conn.session_update(
                session_id, tool_call_start("t1", "look it up", "search", "pending")
            )
            await self._conn.session_update(session_id, tool_call_progress("t1", "completed"))
            await self.say(session_id, "The answer ", "m2")
            await self.say(session_id, "is 42.", "m2")
            await self._conn.session_update(
                session_id, UsageUpdate(session_update="usage_update", used=42, size=1000)
            )
            usage = Usage(input_tokens=30, output_tokens=12, total_tokens=42)
            return PromptResponse(stop_reason="end_turn", usage=usage)
        if mode in ("hang", "ignore-cancel"):
            await self.say(session_id, "working on it")
            if mode == "ignore-cancel":
                await asyncio.Event().wait()
            await cancelled.wait()
            return PromptResponse(stop_reason="cancelled")
        if mode == "crash":
            await self.crash(session_id, "mock agent")
        if mode == "permission":
            return await self._permission(session_id, cancelled)
        if mode == "ask-after-cancel":
            await self.say(session_id, "working on it")
            await cancelled.wait()
            await self._permission(session_id, cancelled)
            return PromptResponse(stop_reason="cancelled")
        if mode == "huge":
            size = int(self.options.chunk_kb * 1024)
            total = int(self.options.huge_mb * 1024 * 1024)
            for index in range(-(-total // size)):
                letter = "abcdefghijklmnopqrstuvwxyz"[index % 26]
                await self.say(session_id, letter * min(size, total - index * size), "m1")
            return PromptResponse(stop_reason="end_turn")
        if mode == "inspect":
            facts = {
                "session_cwd": self.sessions[session_id].cwd,
                "process_cwd": os.getcwd(),
                "env": dict(os.environ),
            }
            await self.say(session_id, json.dumps(facts))
            return PromptResponse(stop_reason="end_turn")
        if mode == "error":
            raise RequestError.internal_error({"details": "the mock agent fails this prompt"})
        if mode in ("bad-error", "wrong-id", "partial-line"):
            # the client's third request is the prompt (initialize 0, session/new 1)
            raw = {
                "bad-error": b'{"jsonrpc":"2.0","id":2,"error":"boom"}\n',
                "wrong-id": b'{"jsonrpc":"2.0","id":99,"result":{"stopReason":"end_turn"}}\n',
                "partial-line": b'{"jsonrpc":"2.0","id":2,"resu',
            }[mode]
            write_raw(raw)
            await asyncio.Event().wait()
        if mode == "notice":
            await self.say(session_id, "Working.", "m1")
            title = "Warning: auto mode uses a classifier"
            if self._notices:  # the acp models know no notice update: write it raw
                notice = {"sessionUpdate": "notice", "severity": "info", "title": title}
                message = {
                    "jsonrpc": "2.0",
                    "method": "session/update",
                    "params": {"sessionId": session_id, "update": notice},
                }
                write_raw(json.dumps(message).encode() + b"\n")
            else:
                update = agent_message(title)
                update.field_meta = {"claudeCode": {"kind": "informational"}}
                await self._conn.session_update(session_id, update)
            await self.say(session_id, "The answer.", "m2")
            return PromptResponse(stop_reason="end_turn")
        raise RequestError.invalid_params({"details": f"unknown mock mode {mode!r}"})

    async def _permission(self, session_id: str, cancelled: asyncio.Event) -> PromptResponse:
        await self._conn.session_update(
            session_id, tool_call_start("p1", "write notes.txt", "edit", "pending")
        )
        if self._modes.get(session_id) in ("auto", "bypassPermissions"):
            await self._conn.session_update(session_id, tool_call_progress("p1", "completed"))
            await self.say(session_id, "permission: self-approved")
            return PromptResponse(stop_reason=self.options.stop_reason)
        options = [
            PermissionOption(option_id="yes", name="Allow once", kind="allow_once"),
            PermissionOption(option_id="always", name="Always allow", kind="allow_always"),
            PermissionOption(option_id="no", name="Reject", kind="reject_once"),
            PermissionOption(option_id="never", name="Always reject", kind="reject_always"),
        ]
        response = await self._conn.request_permission(
            session_id,
            ToolCallUpdate(tool_call_id="p1", title="write notes.txt", kind="edit"),
            options,
        )
        outcome = response.outcome
        if not isinstance(outcome, AllowedOutcome):
            await self._conn.session_update(session_id, tool_call_progress("p1", "failed"))
            await self.say(session_id, "permission: cancelled")
            stop = "cancelled" if cancelled.is_set() else "end_turn"
            return PromptResponse(stop_reason=stop)
        kind = next(o.kind for o in options if o.option_id == outcome.option_id)
        allowed = kind.startswith("allow")
        await self._conn.session_update(
            session_id, tool_call_progress("p1", "completed" if allowed else "failed")
        )
        await self.say(session_id, f"permission: {kind}")
        return PromptResponse(stop_reason=self.options.stop_reason)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m dsh.testing.mock_acp_agent")
    parser.add_argument("--mode", choices=MODES, default="normal")
    parser.add_argument("--ignore-eof", action="store_true")
    parser.add_argument("--escapee", action="store_true")
    parser.add_argument("--stop-reason", default="end_turn")
    parser.add_argument("--huge-mb", type=float, default=4.0)
    parser.add_argument("--chunk-kb", type=float, default=256.0)
    parser.add_argument("--delay", type=float, default=30.0)
    parser.add_argument("--modes", default="")
    parser.add_argument("--initial-mode", default=None)
    parser.add_argument("--refuse-set-mode", action="store_true")
    return parser.parse_args(argv)


async def serve(options: argparse.Namespace) -> None:
    """Serve ACP on stdio until stdin closes (and linger if told to)."""
    stubborn = options.ignore_eof or options.mode == "slow-eof"
    if stubborn:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if options.mode == "exit-on-start":
        sys.stderr.write("mock agent: refusing to start (exit-on-start mode)\n")
        sys.stderr.flush()
        os._exit(7)
    if options.mode == "slow-start":
        await asyncio.sleep(options.delay)
    agent = MockAgent(options)
    await serve_stdio(agent, on_message=agent.observe)
    if stubborn:
        sys.stderr.write("mock agent: stdin closed, staying alive\n")
        sys.stderr.flush()
        while True:
            await asyncio.sleep(3600)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``python -m dsh.testing.mock_acp_agent``."""
    options = parse_args(argv)
    if options.escapee:
        subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(120)"],
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
    asyncio.run(serve(options))
