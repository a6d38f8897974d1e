"""What one ``dsh acp`` session sends its client: events as ACP session updates, and
``ask`` permissions as ``session/request_permission``.

Tool calls as an editor sees them:

* each carries the ``kind`` of its tool (``Tool.kind``: read, edit, search, execute...)
  and the title the permission request shows (``Run `ls```), in the ``tool_call``
  update and in the permission request alike;
* a permission request goes out only after the ``tool_call`` update of the same
  ``toolCallId`` has been delivered; a call of an in-process child, which has no update
  of its own, is announced first (and ended when the child's tool returns);
* ``toolCallId`` is unique in the session: the model's own id where it is new, else
  that id with a ``-2``, ``-3``... suffix (models that number the calls of each
  response from ``call_0``); an in-process child's ids are prefixed with its agent id
  (``<agent id>/call_0``), so the child's first call never takes the lead's id.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from acp.schema import (
    AgentMessageChunk,
    AllowedOutcome,
    ContentToolCallContent,
    PermissionOption,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
    ToolKind,
    UsageUpdate,
    UserMessageChunk,
)

from dsh.acp._schema import agent_message, text_block, tool_call_progress, tool_call_start
from dsh.core import Agent as DshAgent
from dsh.core import PermissionDecision, PermissionRequest, text_of
from dsh.core.lifecycle import Disposer
from dsh.core.sessions import Event
from dsh.subagent import SubagentProgress
from dsh.subagent.kit import turn_usage

__all__ = ["TOOL_KINDS", "SessionUpdates", "Update"]

Update = AgentMessageChunk | UserMessageChunk | ToolCallStart | ToolCallProgress | UsageUpdate

TOOL_KINDS: frozenset[ToolKind] = frozenset(
    ("read", "edit", "delete", "move", "search", "execute", "think", "fetch", "other")
)
"""The tool kinds ACP knows; any other ``Tool.kind`` is sent as ``other``."""

_PERMISSION_OPTIONS = [
    PermissionOption(option_id="allow_once", name="Allow once", kind="allow_once"),
    PermissionOption(option_id="allow_always", name="Always allow", kind="allow_always"),
    PermissionOption(option_id="reject_once", name="Reject", kind="reject_once"),
]


class SessionUpdates:
    """The updates of the session whose agent is ``lead``, put on ``queue`` (which a
    pump sends in order). See the module docstring for tool calls."""

    def __init__(self, lead: DshAgent, queue: asyncio.Queue[Update]) -> None:
        self.lead = lead
        self.queue = queue
        self.pump: asyncio.Task[None] | None = None
        """The task sending ``queue``: a permission request waits for it to catch up."""
        self._used: set[str] = set()
        self._current: dict[tuple[str, str], str] = {}
        """(agent id, the model's call id) → the ACP id of the call running now."""
        self._watches: dict[str, Disposer] = {}

    # -- ids ------------------------------------------------------------------------

    def _assign(self, agent_id: str, call_id: str) -> str:
        base = call_id if agent_id == self.lead.id else f"{agent_id}/{call_id}"
        acp_id, n = base, 1
        while acp_id in self._used:
            n += 1
            acp_id = f"{base}-{n}"
        self._used.add(acp_id)
        self._current[(agent_id, call_id)] = acp_id
        return acp_id

    def _ended(self, agent_id: str, call_id: str) -> str:
        found = self._current.pop((agent_id, call_id), None)
        return found if found is not None else self._assign(agent_id, call_id)

    # -- the lead's events ----------------------------------------------------------

    def live(self, event: Event, dsh_client: bool) -> list[Update]:
        """Updates for an event of the lead's running turn."""
        agent = self.lead
        if event.seq == -1:
            if event.type == "assistant/delta":
                text = event.data.get("text")
                if text:
                    # the assistant/message these deltas build will get the next seq
                    return [agent_message(str(text), _message_id(len(agent.session)))]
            return []
        if event.type in ("tool/call", "tool/result"):
            return self.replay(event)
        if dsh_client and event.type == "assistant/message" and event.data.get("usage"):
            return [_usage_update(agent)]
        return []

    def replay(self, event: Event) -> list[Update]:
        """Updates that replay a stored event of the lead."""
        data = event.data
        if event.type == "user/message":
            text = text_of(data.get("content"))
            return [_user_text(text)] if text else []
        if event.type == "assistant/message":
            text = text_of(data.get("content"))
            if not text:
                return []
            return [agent_message(text, _message_id(event.seq))]
        if event.type == "tool/call":
            name = str(data.get("name", "tool"))
            arguments = data.get("arguments")
            kind, title = _kind_and_title(self.lead, name, arguments)
            acp_id = self._assign(self.lead.id, str(data.get("id")))
            return [tool_call_start(acp_id, title, kind, "pending", raw_input=arguments)]
        if event.type == "tool/result":
            return [_result(self._ended(self.lead.id, str(data.get("call_id"))), data)]
        return []

    # -- nested runs ----------------------------------------------------------------

    def relay(self, item: SubagentProgress) -> None:
        """A nested run's item as an update: its own ``tool_call`` named
        ``dsh-run-<id>`` (started at child_start, ended at child_end), the item in
        ``_meta.dsh.progress``."""
        run_id = item.path[-1]
        meta = {"dsh": {"progress": item.to_json()}}
        call_id = f"dsh-run-{run_id}"
        if item.kind == "child_start":
            title = item.label or item.provider or "subagent"
            update: Update = tool_call_start(
                call_id, f"subagent: {title}", "other", "in_progress", meta=meta
            )
        elif item.kind == "child_end":
            ok = item.stop_reason == "completed"
            update = tool_call_progress(call_id, "completed" if ok else "failed", meta=meta)
        else:
            update = tool_call_progress(call_id, None, meta=meta)
        self.queue.put_nowait(update)

    # -- permissions ----------------------------------------------------------------

    async def ask(
        self, conn: Any, session_id: str, request: PermissionRequest
    ) -> PermissionDecision:
        """Ask the client about ``request`` once its ``tool_call`` is delivered."""
        agent = request.agent
        kind: ToolKind = request.kind if request.kind in TOOL_KINDS else "other"
        raw_input = dict(request.arguments) if request.arguments else None
        acp_id = self._current.get((agent.id, request.call_id))
        if acp_id is None:  # an in-process child's call: announce it, end it with its result
            acp_id = self._assign(agent.id, request.call_id)
            self.queue.put_nowait(
                tool_call_start(acp_id, request.title, kind, "pending", raw_input=raw_input)
            )
            self._watch_result(agent, request.call_id)
        await self._delivered()
        try:
            response = await conn.request_permission(
                session_id,
                ToolCallUpdate(
                    tool_call_id=acp_id, title=request.title, kind=kind, raw_input=raw_input
                ),
                _PERMISSION_OPTIONS,
            )
        except Exception as exc:  # the client cannot answer: fail closed
            return PermissionDecision(
                False, f"the ACP client could not be asked for permission ({exc})"
            )
        outcome = response.outcome
        if isinstance(outcome, AllowedOutcome):
            if outcome.option_id == "allow_always":
                return PermissionDecision(True, always=True)
            if outcome.option_id == "allow_once":
                return PermissionDecision(True)
        return PermissionDecision(
            False, f"the user did not allow {request.title} (ACP client answer)"
        )

    async def _delivered(self) -> None:
        """Wait until every queued update has been sent (unless nothing sends them)."""
        if self.pump is not None and not self.pump.done():
            await self.queue.join()

    def _watch_result(self, agent: DshAgent, call_id: str) -> None:
        key = f"{agent.id}\n{call_id}"

        def observe(event: Event) -> None:
            if event.type == "tool/result" and event.data.get("call_id") == call_id:
                self.queue.put_nowait(_result(self._ended(agent.id, call_id), event.data))
                off = self._watches.pop(key, None)
                if off is not None:
                    off()

        previous = self._watches.pop(key, None)
        if previous is not None:
            previous()
        self._watches[key] = agent.observe(observe, deltas=False)

    def close(self) -> None:
        """Stop watching children's tool calls."""
        watches, self._watches = self._watches, {}
        for off in watches.values():
            off()


def _kind_and_title(agent: DshAgent, name: str, arguments: Any) -> tuple[ToolKind, str]:
    """The ACP kind of tool ``name`` and the title its permission request would show."""
    tool = agent.tools.get(name)
    if tool is None:
        return "other", name
    kind: ToolKind = tool.kind if tool.kind in TOOL_KINDS else "other"
    try:
        parsed = tool.parse(arguments if isinstance(arguments, Mapping) else {})
    except Exception:  # invalid arguments: the call fails, the title stays plain
        return kind, name
    return kind, tool.title_for(parsed)


def _result(acp_id: str, data: Mapping[str, Any]) -> ToolCallProgress:
    failed = bool(data.get("is_error"))
    content = text_of(data.get("content"))
    return tool_call_progress(
        acp_id,
        "failed" if failed else "completed",
        content=[ContentToolCallContent(type="content", content=text_block(content))]
        if content
        else None,
    )


def _user_text(text: str) -> UserMessageChunk:
    return UserMessageChunk(session_update="user_message_chunk", content=text_block(text))


def _message_id(seq: int) -> str:
    return f"m{seq}"


def _usage_update(agent: DshAgent) -> UsageUpdate:
    """The turn's running usage, for a dsh client (``_meta.dsh.usage``)."""
    events = agent.session.events
    own = turn_usage(events, _turn_start(events))
    return UsageUpdate(
        session_update="usage_update",
        used=own.total_tokens,
        size=0,
        field_meta={"dsh": {"usage": own.to_json()}},
    )


def _turn_start(events: Sequence[Event]) -> int:
    for index in range(len(events) - 1, -1, -1):
        if events[index].type == "turn/start":
            return index
    return 0
