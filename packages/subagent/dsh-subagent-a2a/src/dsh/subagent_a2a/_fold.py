"""Folding an A2A task's events: its state, its output, its usage, and progress items.

Events come from the stream (``StreamResponse``: a task snapshot, a message, a status
update, an artifact update) or from polling (task snapshots: the agent messages of
their history not seen yet are the steps since the last poll; a status seen already is
not reported again). The output is the text of
the task's artifacts (parts in order; an update with ``append = false`` replaces the
artifact), else the text of the agent's last message (a status message of a working or
completed task, or a direct reply). Progress items, built only while someone listens:

* artifact text chunks → ``text`` (a replacement marked ``metadata.dsh.replace``, the
  whole answer again, is not new text); a working status message → ``text``;
* ``metadata.dsh.progress`` of a status update, its message or an artifact → the item
  it names, ``path`` included (a ``dsh a2a`` server reporting its tool calls, usage and
  nested delegations);
* a task that stops for input or authentication → ``notice``.

Usage comes from ``metadata.dsh.usage`` (a ``dsh a2a`` server's tree-wide figure in its
final status update, merged into the task's metadata), else from its running ``usage``
items, else it is unknown.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from a2a.types import (
    Message,
    Role,
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)

from dsh.subagent import SubagentProgress, SubagentUsage
from dsh.subagent.kit import plain_value as plain

__all__ = ["INTERRUPTED", "TERMINAL", "TaskFold", "plain", "state_name"]

META_KEY = "dsh"

TERMINAL = frozenset(
    {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_REJECTED,
    }
)
INTERRUPTED = frozenset({TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED})


def state_name(state: TaskState) -> str:
    """``input-required`` for ``TASK_STATE_INPUT_REQUIRED`` (the spec's wording)."""
    name: str = TaskState.Name(state)
    return name.removeprefix("TASK_STATE_").lower().replace("_", "-")


def _dsh(meta: Any) -> Mapping[str, Any]:
    """``meta.dsh`` of a protobuf ``Struct``, as plain Python ({} when absent)."""
    if META_KEY not in meta.fields:
        return {}
    data = plain(meta[META_KEY])
    return data if isinstance(data, Mapping) else {}


def message_text(message: Message) -> str:
    """The text parts of ``message``, joined."""
    return "".join(part.text for part in message.parts if part.WhichOneof("content") == "text")


class TaskFold:
    """One task's events: the state, the output so far, usage, and progress items."""

    def __init__(self) -> None:
        self.emit: Callable[[SubagentProgress], None] | None = None
        """Where progress items go (None: nobody listens, none are built)."""
        self.task_id: str | None = None
        self.context_id: str | None = None
        self.state: TaskState = TaskState.TASK_STATE_UNSPECIFIED
        self.status_text = ""
        """The text of the last status message (why a task failed, what it asks for)."""
        self.reply: str | None = None
        """A direct reply (the agent answered with a message, no task)."""
        self.last_message = ""
        """The text of the agent's last working or completed status message."""
        self.artifacts: dict[str, list[str]] = {}
        self.final_usage: SubagentUsage | None = None
        self.running_usage: SubagentUsage | None = None
        self.dsh_stop: str | None = None
        self.events = 0
        self._seen: set[str] = set()
        """The agent messages already folded (by message id, else text): a poll that
        returns the same status again, or a message again in the history, is not news."""

    # -- state -------------------------------------------------------------------------

    @property
    def finished(self) -> bool:
        """True once the task is terminal or interrupted, or the agent replied directly."""
        return self.reply is not None or self.state in TERMINAL or self.state in INTERRUPTED

    def output(self) -> str:
        """The answer so far: the artifacts' text, else the agent's last message."""
        if self.reply is not None:
            return self.reply
        return self._artifact_text() or self.last_message

    def _artifact_text(self) -> str:
        texts = ["".join(chunks) for chunks in self.artifacts.values()]
        return "\n".join(t for t in texts if t)

    def usage(self) -> SubagentUsage:
        """The final usage the agent reported, else its running usage, else unknown."""
        if self.final_usage is not None:
            return self.final_usage
        if self.running_usage is not None:
            return SubagentUsage.from_json({**self.running_usage.to_json(), "incomplete": True})
        return SubagentUsage.unknown()

    # -- events ------------------------------------------------------------------------

    def feed(self, response: StreamResponse) -> None:
        """Fold one streamed event."""
        self.events += 1
        which = response.WhichOneof("payload")
        if which == "task":
            self.feed_task(response.task)
        elif which == "status_update":
            self._status_update(response.status_update)
        elif which == "artifact_update":
            self._artifact_update(response.artifact_update)
        elif which == "message":
            self._reply(response.message)

    def feed_task(self, task: Task) -> None:
        """Fold a task snapshot (the stream's first event, a poll, a ``CancelTask``
        answer): the agent messages of its history not seen yet, in order (the steps
        between two polls), then its artifacts and its status."""
        self._ids(task.id, task.context_id)
        before = self._artifact_text()
        for message in task.history:
            if message.role == Role.ROLE_AGENT and self._first_time(message):
                text = message_text(message)
                relayed = self._metadata(message.metadata, progress=True)
                if text:
                    self.last_message = text
                    if not relayed:
                        self._emit(SubagentProgress("text", text=text))
        if task.artifacts:
            self.artifacts = {
                artifact.artifact_id: [
                    part.text for part in artifact.parts if part.WhichOneof("content") == "text"
                ]
                for artifact in task.artifacts
            }
        self._status(task.status, relayed=False)
        self._metadata(task.metadata, progress=False)
        after = self._artifact_text()  # (new messages were reported above)
        if after != before and after:
            self._emit(SubagentProgress("text", text=after.removeprefix(before)))

    def _reply(self, message: Message) -> None:
        self._ids(message.task_id or None, message.context_id or None)
        self.reply = message_text(message)
        self._metadata(message.metadata, progress=True)
        if self.reply:
            self._emit(SubagentProgress("text", text=self.reply))

    def _status_update(self, event: TaskStatusUpdateEvent) -> None:
        self._ids(event.task_id, event.context_id)
        relayed = self._metadata(event.metadata, progress=True)
        self._status(event.status, relayed=relayed)

    def _status(self, status: TaskStatus, *, relayed: bool) -> None:
        state = status.state
        previous = self.state
        if state != TaskState.TASK_STATE_UNSPECIFIED:
            self.state = state
        if status.HasField("message") and self._first_time(status.message):
            message = status.message
            text = message_text(message)
            relayed = self._metadata(message.metadata, progress=True) or relayed
            if text:
                self.status_text = text
                if message.role != Role.ROLE_USER and state in (
                    TaskState.TASK_STATE_WORKING,
                    TaskState.TASK_STATE_COMPLETED,
                    TaskState.TASK_STATE_SUBMITTED,
                ):
                    self.last_message = text
                    if not relayed and state != TaskState.TASK_STATE_COMPLETED:
                        self._emit(SubagentProgress("text", text=text))
        if state in INTERRUPTED and previous != state:
            why = f": {self.status_text}" if self.status_text else ""
            self._emit(SubagentProgress("notice", text=f"the agent is {state_name(state)}{why}"))

    def _artifact_update(self, event: TaskArtifactUpdateEvent) -> None:
        self._ids(event.task_id, event.context_id)
        artifact = event.artifact
        texts = [part.text for part in artifact.parts if part.WhichOneof("content") == "text"]
        key = artifact.artifact_id
        if event.append and key in self.artifacts:
            self.artifacts[key].extend(texts)
        else:
            self.artifacts[key] = list(texts)
        relayed = self._metadata(event.metadata, progress=True)
        relayed = self._metadata(artifact.metadata, progress=True) or relayed
        replacing = bool(_dsh(artifact.metadata).get("replace"))
        text = "".join(texts)
        if text and not relayed and not replacing:
            self._emit(SubagentProgress("text", text=text))

    def _metadata(self, meta: Any, *, progress: bool) -> bool:
        """Read ``meta.dsh``: usage, stop reason, and (``progress``) a relayed item.
        True if it carried a progress item."""
        dsh = _dsh(meta)
        if not dsh:
            return False
        usage = dsh.get("usage")
        if isinstance(usage, Mapping):
            self.final_usage = SubagentUsage.from_json(usage)
        stop = dsh.get("stopReason")
        if isinstance(stop, str):
            self.dsh_stop = stop
        item = dsh.get("progress")
        if not progress or not isinstance(item, Mapping):
            return False
        try:
            parsed = SubagentProgress.from_json(item)
        except ValueError:
            return False
        if parsed.kind == "usage" and not parsed.path and parsed.usage is not None:
            self.running_usage = parsed.usage
        self._emit(parsed)
        return True

    def _first_time(self, message: Message) -> bool:
        """True the first time ``message`` is folded."""
        key = message.message_id or f"text:{message_text(message)}"
        if key in self._seen:
            return False
        self._seen.add(key)
        return True

    def _ids(self, task_id: str | None, context_id: str | None) -> None:
        if task_id and self.task_id is None:
            self.task_id = task_id
        if context_id and self.context_id is None:
            self.context_id = context_id

    def _emit(self, item: SubagentProgress) -> None:
        emit = self.emit
        if emit is not None:
            emit(item)
