"""Tool calls on a tape: the client side of a tape proxy's tool route.

A tape proxy (dsh-tape's ``TapeProxy``) records a run's model calls; with
``DSH_TAPE_PROXY`` (:data:`TAPE_PROXY_VARIABLE`) naming it, every agent of every dsh
process of the tree also puts its tool calls and their results on the same tape,
through ``POST <DSH_TAPE_PROXY>/t/tools``. Core knows the proxy only by this route
(stdlib HTTP, no dependency): a :class:`Context` made where the variable is set has a
:class:`ToolTape` as ``ctx.tool_tape``, and the agent loop asks it around each tool
call:

* ``{"phase": "call", ...}`` before running: the proxy answers ``{"action": "run"}``
  (run it: a replay that re-runs tools), ``{"action": "record"}`` (run it and send the
  result: recording, or resuming past the tape's end) or ``{"action": "result",
  "result": {...}}`` (the recorded result: ``--replay-tools``, or resuming); HTTP 409
  when the call is not on the tape (a divergence: the tool is not run, the model gets
  the message as an error result);
* ``{"phase": "result", ..., "result": {...}}`` after a recorded run.

A recording proxy says so (``"mode": "record"``): the client then stops asking before
each call and only sends results (one round trip per call).

In the proxy's own process the same route is a function (:data:`ToolRoute`, the
proxy's ``tool_call``): ``ToolTape(route=...)`` calls it directly — the same bodies,
the same answers, no HTTP and no sender thread (the proxy's lock orders the lines).

A call names its agent as the proxy keys model calls: ``conversation`` (a short hash
of the agent's system prompt and first user message) and ``call`` (how many
assistant messages came before the one that asked for the tool), then the tool's
``name`` and ``arguments``.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import anyio.to_thread

from dsh.core._content import text_of
from dsh.core._session import Event
from dsh.core._tools import ToolResult

__all__ = [
    "RECORDER_GROUP",
    "TAPE_PROXY_VARIABLE",
    "TOOL_ROUTE",
    "ToolKeys",
    "ToolRoute",
    "ToolTape",
    "start_recorder",
    "tool_key",
]

TAPE_PROXY_VARIABLE = "DSH_TAPE_PROXY"
"""The environment variable naming a run's tape proxy (``http://127.0.0.1:PORT/<token>``)."""

TOOL_ROUTE = "/t/tools"
"""The proxy's route for tool calls, after its token."""

ToolRoute = Callable[[dict[str, Any]], tuple[int, dict[str, Any]]]
"""The tool route as a function in the proxy's process: a JSON body in, the HTTP
status and JSON answer out (what the route would answer)."""


def tool_key(prompt: str, events: Sequence[Event]) -> tuple[str, int]:
    """``(conversation, call)`` of an agent's tool call: a short hash of the system
    prompt and the first user message's text, and the number of assistant messages
    before the last one (the model call that asked for the tool)."""
    return ToolKeys().key(prompt, events)


class ToolKeys:
    """:func:`tool_key` for one agent, call after call: a log only grows, so each call
    reads only the events appended since the one before (the same answer as
    :func:`tool_key`, in O(new events) instead of O(log))."""

    __slots__ = ("_assistant", "_digest", "_events", "_first_user", "_hashed", "_scanned")

    def __init__(self) -> None:
        self._events: Sequence[Event] | None = None
        self._scanned = 0
        self._first_user = ""
        self._assistant = 0
        self._hashed: tuple[str, str] | None = None
        self._digest = ""

    def key(self, prompt: str, events: Sequence[Event]) -> tuple[str, int]:
        """``(conversation, call)`` as :func:`tool_key` gives it."""
        length = len(events)
        if events is not self._events or length < self._scanned:  # another log: read it all
            self._events, self._scanned, self._first_user, self._assistant = events, 0, "", 0
        first_user, assistant = self._first_user, self._assistant
        for index in range(self._scanned, length):
            event = events[index]
            if event.type == "assistant/message":
                assistant += 1
            elif event.type == "user/message" and not first_user:
                first_user = text_of(event.data.get("content"))
        self._scanned, self._first_user, self._assistant = length, first_user, assistant
        if self._hashed != (prompt, first_user):
            text = json.dumps([prompt, first_user])
            self._digest = hashlib.sha256(text.encode()).hexdigest()[:12]
            self._hashed = (prompt, first_user)
        return self._digest, max(assistant - 1, 0)


class ToolTape:
    """A tape proxy's tool route, as the agent loop uses it (see the module): over HTTP
    at ``proxy_url``, or, in the proxy's own process, by calling ``route``."""

    __slots__ = ("_host", "_path", "_pending", "_port", "_record_only", "_route", "_sender")

    def __init__(self, proxy_url: str | None = None, *, route: ToolRoute | None = None) -> None:
        self._route = route
        if route is not None:
            self._host, self._port, self._path = "", 0, ""
        else:
            parts = urlsplit((proxy_url or "").rstrip("/"))
            if parts.scheme != "http" or not parts.hostname or not parts.port:
                raise ValueError(f"not a tape proxy URL: {proxy_url!r}")
            self._host = parts.hostname
            self._port = parts.port
            self._path = parts.path + TOOL_ROUTE
        self._record_only = False
        """The proxy said it only records: no need to ask before each call."""
        self._pending: queue.Queue[bytes] = queue.Queue()
        self._sender: threading.Thread | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ToolTape | None:
        """The tape ``DSH_TAPE_PROXY`` names in ``environ`` (default ``os.environ``), or
        None when it names none (or nothing usable)."""
        value = (os.environ if environ is None else environ).get(TAPE_PROXY_VARIABLE, "")
        if not value.strip():
            return None
        try:
            return cls(value.strip())
        except ValueError:
            return None

    async def before(
        self, conversation: str, call: int, name: str, arguments: Any
    ) -> tuple[str, ToolResult | None]:
        """Ask the tape about a call: ``("run", None)``, ``("record", None)``,
        ``("result", recorded)`` or ``("diverged", error result)``."""
        if self._record_only:
            return "record", None
        body = {
            "phase": "call",
            "conversation": conversation,
            "call": call,
            "name": name,
            "arguments": arguments,
        }
        status, answer = await self._post(body)
        if status == 409:
            message = str((answer.get("error") or {}).get("message") or "tape divergence")
            return "diverged", ToolResult(message, is_error=True)
        if status != 200:
            message = str((answer.get("error") or {}).get("message") or f"HTTP {status}")
            return "diverged", ToolResult(f"tape proxy: {message}", is_error=True)
        action = str(answer.get("action") or "run")
        self._record_only = answer.get("mode") == "record"
        if action == "result":
            recorded = answer.get("result") or {}
            result = ToolResult(
                list(recorded.get("content") or []),
                bool(recorded.get("is_error")),
                recorded.get("data"),
            )
            return "result", result
        return ("record" if action == "record" else "run"), None

    async def after(
        self, conversation: str, call: int, name: str, arguments: Any, result: ToolResult
    ) -> None:
        """Put a run call's result on the tape (after ``before`` said ``"record"``)."""
        recorded: dict[str, Any] = {"content": result.blocks(), "is_error": result.is_error}
        if result.data is not None:
            recorded["data"] = result.data
        body = {
            "phase": "result",
            "conversation": conversation,
            "call": call,
            "name": name,
            "arguments": arguments,
            "result": recorded,
        }
        if self._route is not None:
            self._call_route(body)
            return
        if not self._record_only:
            await self._post(body)
            return
        # recording only: a sender thread posts it, in order, while the agent goes on
        # (a result lost with a killed process is a step run again: at least once)
        self._pending.put(json.dumps(body, default=str).encode())
        if self._sender is None:
            self._sender = threading.Thread(target=self._send, name="dsh tool tape", daemon=True)
            self._sender.start()

    def drain(self, timeout: float = 10.0) -> bool:
        """Wait (blocking) until every result handed to :meth:`after` is posted; False
        when ``timeout`` ran out first. A context drains its tape when it closes."""
        if self._sender is None:
            return True
        deadline = time.monotonic() + timeout
        while self._pending.unfinished_tasks:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.002)
        return True

    def _send(self) -> None:
        connection: http.client.HTTPConnection | None = None
        while True:
            data = self._pending.get()
            try:
                for _attempt in range(2):  # once more on a fresh connection
                    if connection is None:
                        connection = http.client.HTTPConnection(self._host, self._port, timeout=60)
                    try:
                        connection.request(
                            "POST", self._path, data, {"Content-Type": "application/json"}
                        )
                        connection.getresponse().read()
                        break
                    except (OSError, http.client.HTTPException):
                        connection.close()
                        connection = None
            finally:
                self._pending.task_done()

    def _call_route(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """The in-process route; a value JSON cannot hold goes as the HTTP route would
        get it (through ``json`` with ``default=str``)."""
        assert self._route is not None
        try:
            return self._route(body)
        except TypeError:
            normalized: dict[str, Any] = json.loads(json.dumps(body, default=str))
            return self._route(normalized)

    async def _post(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if self._route is not None:
            return self._call_route(body)
        data = json.dumps(body, default=str).encode()
        try:
            return await anyio.to_thread.run_sync(self._post_sync, data)
        except (OSError, http.client.HTTPException, ValueError) as exc:
            return 502, {"error": {"message": f"unreachable: {type(exc).__name__}: {exc}"}}

    def _post_sync(self, data: bytes) -> tuple[int, dict[str, Any]]:
        connection = http.client.HTTPConnection(self._host, self._port, timeout=60)
        try:
            connection.request("POST", self._path, data, {"Content-Type": "application/json"})
            response = connection.getresponse()
            raw = response.read()
        finally:
            connection.close()
        answer = json.loads(raw) if raw else {}
        return response.status, answer if isinstance(answer, dict) else {}


RECORDER_GROUP = "dsh.tape_recorders"
"""The entry-point group of the tape recorder ``Context.open(record=...)`` starts
(dsh-tape registers one, named ``tape``): ``start(ctx, directory)`` returns the
function that stops it."""


def start_recorder(ctx: Any, directory: str | os.PathLike[str]) -> Callable[[], None]:
    """Start the installed tape recorder on ``ctx`` (see :data:`RECORDER_GROUP`);
    :class:`~dsh.core.ConfigError` when no package provides one."""
    from importlib.metadata import entry_points

    from dsh.core._errors import ConfigError

    found = [point for point in entry_points(group=RECORDER_GROUP) if point.name == "tape"]
    if not found:
        raise ConfigError("record= needs a tape recorder: install dsh-tape")
    start = found[0].load()
    stop: Callable[[], None] = start(ctx, directory)
    return stop
