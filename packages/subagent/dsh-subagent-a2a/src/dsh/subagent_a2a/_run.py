"""One ``a2a`` run on the provider kit: the agent card, one task, ``CancelTask``.

* :meth:`A2ARun.open` fetches the agent card (with the configured headers) and checks
  it: a transport dsh speaks, text input, dsh's extension when ``depth_limit`` is
  configured; then makes the SDK client for it.
* :meth:`A2ARun.turn` sends the prompt as one message (``metadata.dsh``: depth, limit,
  parent session), streaming where the card says the agent streams, else send and
  poll ``GetTask``; a stream that breaks off after the task exists is followed by
  polling. The task's end settles the run: ``completed`` → completed (output from the
  artifacts, else the agent's last message), ``failed`` / ``rejected`` → error with the
  agent's words, ``canceled`` → aborted, ``input-required`` / ``auth-required`` →
  error (a one-shot run cannot answer; the remote task is cancelled). A ``dsh a2a``
  agent's own stop reason (``metadata.dsh.stopReason``: max-tokens, refusal) wins.
* :meth:`A2ARun.cancel` sends ``CancelTask`` (waiting a moment for the task id if the
  first event has not arrived yet); an answer that says the task is over ends the turn
  at once (the stream or the next poll need not confirm it).
* Polling (``GetTask``) reports each agent message once: the task's history holds the
  steps since the last poll, and a status already seen is not news.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from typing import Any

import anyio
import httpx
from a2a.client import (
    A2ACardResolver,
    AgentCardResolutionError,
    Client,
    ClientConfig,
    ClientFactory,
)
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    TaskState,
)
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH, TransportProtocol
from a2a.utils.errors import A2AError, TaskNotCancelableError

from dsh.subagent import (
    RunHandle,
    StartFailed,
    SubagentResult,
    SubagentStartRequest,
    SubagentUsage,
    UnsupportedCapability,
)
from dsh.subagent.kit import LINEAGE_EXTENSION_URI, Lineage, RemoteRun
from dsh.subagent_a2a._config import A2AProviderConfig
from dsh.subagent_a2a._fold import TaskFold, plain, state_name

__all__ = ["LINEAGE_EXTENSION_URI", "A2ARun"]

_BINDINGS: dict[str, str] = {
    "jsonrpc": TransportProtocol.JSONRPC.value,
    "http+json": TransportProtocol.HTTP_JSON.value,
}
_TLS = httpx.create_ssl_context()
"""One TLS context for every run's HTTP client (httpx builds a new one, loading the CA
bundle, for each client by default: about 20 ms per delegation). Made when this module
is imported: on the first start, in a worker thread."""
_TASK_ID_WAIT = 2.0
"""Seconds a cancel waits for the task id when the first event has not arrived yet."""


class A2ARun(RemoteRun):
    """The state of one run: its HTTP client, the agent card, the task."""

    def __init__(
        self, provider: str, request: SubagentStartRequest, config: A2AProviderConfig
    ) -> None:
        super().__init__(provider, request, config)
        self.config = config
        self.lineage = Lineage.of_request(request)
        self.fold = TaskFold()
        self.http: httpx.AsyncClient | None = None
        self.client: Client | None = None
        self.card: AgentCard | None = None
        self.streaming = False
        self._secrets: list[str] = []
        self._task_known = asyncio.Event()
        self._closed = False
        self._following: anyio.CancelScope | None = None
        """Around the stream or the polls: cancelled once the task is known to be over."""

    # -- the hooks --------------------------------------------------------------------

    async def open(self) -> None:
        """Fetch and check the agent card; make the SDK client."""
        headers = self._headers()
        timeout = self.timeouts.start_timeout
        self.http = httpx.AsyncClient(
            headers=headers,
            timeout=httpx.Timeout(timeout, read=None),
            follow_redirects=False,
            verify=_TLS,
        )
        card_url = self._card_url()
        self.stages.enter("agent card")
        try:
            card = await A2ACardResolver(self.http, self.config.url).get_agent_card(
                relative_card_path=self.config.card_path
            )
        except AgentCardResolutionError as exc:
            raise StartFailed(
                f"{self.provider} start failed: cannot use the agent card at {card_url}:"
                f" {self._card_problem(exc)}"
            ) from None
        self._check_card(card, card_url)
        self.card = card
        self.streaming = self.config.streaming and card.capabilities.streaming
        self.stages.enter("connect")
        factory = ClientFactory(
            ClientConfig(
                httpx_client=self.http,
                streaming=self.streaming,
                polling=not self.streaming,
                supported_protocol_bindings=[_BINDINGS[t] for t in self.config.transports],
                use_client_preference=True,
            )
        )
        try:
            self.client = factory.create(card)
        except ValueError as exc:
            raise StartFailed(
                f"{self.provider} start failed: the agent card at {card_url} offers no"
                f" usable interface ({exc})"
            ) from None

    async def turn(self) -> SubagentResult:
        """Send the prompt; follow the task to its end; map how it ended."""
        assert self.client is not None
        client = self.client
        request = SendMessageRequest(message=self._message())
        self.stages.enter("SendStreamingMessage" if self.streaming else "SendMessage")
        try:
            with anyio.CancelScope() as scope:
                self._following = scope
                await self._follow(client, request, scope)
        except (A2AError, httpx.HTTPError):
            if self.fold.task_id is None or self.fold.finished or self.stop.aborted:
                raise
            # the stream broke off, but the task exists: follow it by polling
        if not self.fold.finished:
            with anyio.CancelScope() as scope:
                self._following = scope
                await self._poll(client)
        return await self._result()

    async def _follow(
        self, client: Client, request: SendMessageRequest, scope: anyio.CancelScope
    ) -> None:
        """Fold the response stream until the task has finished (or the stream ends).

        Once finished, the rest of the stream (the server closing it) is not waited for:
        ``scope`` is cancelled, which unwinds the SDK's nested generators at once
        (breaking out of the loop instead would leave the inner ones to the garbage
        collector, as tasks that outlive the run)."""
        async for response in client.send_message(request):
            self.fold.feed(response)
            self._note_task()
            if self.budget is not None and self.fold.running_usage is not None:
                self.report_usage(self.fold.running_usage)  # (a reached cap stops the run)
            if self.fold.finished:
                scope.cancel()

    async def cancel(self) -> bool | None:
        """``CancelTask`` for the run's task (True once sent). Its answer is the task as
        the cancel left it: when that says the task is over (``canceled``), the turn
        ends at once, without waiting for the stream or the next poll to say so."""
        client = self.client
        if client is None or self._closed:
            return None
        if self.fold.task_id is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._task_known.wait(), min(_TASK_ID_WAIT, self.timeouts.cancel_grace)
                )
        task_id = self.fold.task_id
        if task_id is None:
            return False
        try:
            answer = await client.cancel_task(CancelTaskRequest(id=task_id))
        except TaskNotCancelableError:
            return True  # it has ended already; the turn sees how
        if answer.id == task_id:
            self.fold.feed_task(answer)
            if self.fold.finished and self._following is not None:
                self._following.cancel()
        return True

    async def close(self) -> None:
        """Close the SDK client and the HTTP connections (idempotent)."""
        self._closed = True
        client, self.client = self.client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await client.close()
        http, self.http = self.http, None
        if http is not None:
            await http.aclose()

    def partial_output(self) -> str:
        """The answer so far."""
        return self.fold.output()

    def usage(self) -> SubagentUsage:
        """What the agent reported (unknown for an agent that reports nothing)."""
        return self.fold.usage()

    def describe(self, error: BaseException) -> str:
        """The stage and the error, with every configured secret masked."""
        return self._scrub(super().describe(error))

    def details(self) -> str:
        """The remote task's id and its last state."""
        if self.fold.task_id is None:
            return ""
        state = state_name(self.fold.state)
        return f"remote task {self.fold.task_id} (context {self.fold.context_id}), last {state}"

    def on_progress_wanted(self, handle: RunHandle) -> Any:
        """Map the task's events to progress items from now on (see :mod:`._fold`)."""
        self.fold.emit = handle.emit

        def stop() -> None:
            self.fold.emit = None

        return stop

    # -- details ----------------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        wanted = dict(self.config.headers_env)
        if self.config.bearer_token_env is not None:
            wanted["Authorization"] = self.config.bearer_token_env
        for header, variable in wanted.items():
            value = os.environ.get(variable)
            if not value:
                field = (
                    "bearer_token_env"
                    if header == "Authorization" and self.config.bearer_token_env
                    else f"headers_env[{header!r}]"
                )
                raise StartFailed(
                    f"{self.provider} start failed: the environment variable {variable}"
                    f" ({field}) is not set"
                )
            self._secrets.append(value)
            if header == "Authorization" and self.config.bearer_token_env:
                value = f"Bearer {value}"
            headers[header] = value
        return headers

    def _card_url(self) -> str:
        path = self.config.card_path or AGENT_CARD_WELL_KNOWN_PATH
        return f"{self.config.url.rstrip('/')}/{path.lstrip('/')}"

    def _card_problem(self, error: AgentCardResolutionError) -> str:
        status = error.status_code
        if status in (401, 403):
            return (
                f"HTTP {status}: the agent refused the credentials (set bearer_token_env /"
                " headers_env to variables holding valid ones)"
            )
        if status is not None:
            return f"HTTP {status}"
        text = str(error.message or error)
        if "Network communication error" in text:
            return "unreachable (" + text.split(": ", 1)[-1] + ")"
        return self._scrub(text)

    def _check_card(self, card: AgentCard, card_url: str) -> None:
        problem = _card_problem(card, self.config)
        if problem is not None:
            raise StartFailed(
                f"{self.provider} start failed: the agent card at {card_url} {problem}"
            )
        if self.request.budget is not None and not _extension_says(card, "budget"):
            raise UnsupportedCapability(
                f'subagent provider "{self.provider}": the agent card at {card_url} does not'
                f" declare that the agent enforces dsh's budget (the extension"
                f" {LINEAGE_EXTENSION_URI} with params.budget = true), so a run with a"
                " budget cannot be started on it; use an agent that does (dsh a2a), or"
                " delegate without a budget"
            )

    def _message(self) -> Message:
        parts = [
            Part(text=str(block.get("text", "")))
            for block in self.request.prompt_blocks
            if block.get("type") == "text"
        ]
        message = Message(
            role=Role.ROLE_USER,
            message_id=uuid.uuid4().hex,
            parts=parts or [Part(text=self.request.prompt_text)],
        )
        message.metadata.update({"dsh": self.lineage.meta()})
        return message

    def _note_task(self) -> None:
        if self.fold.task_id is not None and not self._task_known.is_set():
            self._task_known.set()

    async def _poll(self, client: Client) -> None:
        task_id = self.fold.task_id
        if task_id is None:
            raise A2AError("the agent answered without a task or a message")
        self.stages.enter("GetTask")
        while not self.fold.finished:
            await anyio.sleep(self.config.poll_interval)
            self.fold.feed_task(await client.get_task(GetTaskRequest(id=task_id)))

    async def _result(self) -> SubagentResult:
        fold = self.fold
        output = fold.output()
        usage = fold.usage()
        if fold.reply is not None:
            return SubagentResult(output, "completed", usage=usage)
        state = fold.state
        said = f": {self._scrub(fold.status_text)}" if fold.status_text else ""
        name = self.provider
        if state == TaskState.TASK_STATE_COMPLETED:
            if fold.dsh_stop in ("max-tokens", "refusal"):
                return SubagentResult(
                    output,
                    fold.dsh_stop,
                    diagnostic=f"{name}: the remote dsh agent stopped ({fold.dsh_stop}){said}",
                    usage=usage,
                )
            return SubagentResult(output, "completed", usage=usage)
        if state == TaskState.TASK_STATE_CANCELED:
            why = f"{name}: the remote agent cancelled the task{said}"
            # cancelled as dsh asked: no diagnostic, the kit gives the stop's reason
            return SubagentResult.aborted(
                None if self.stop.aborted else why, output=output, usage=usage
            )
        if state in (TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_REJECTED):
            if fold.dsh_stop == "budget":  # a dsh a2a child stopped at its budget
                diagnostic = self._scrub(fold.status_text or "the agent stopped at its budget")
                return SubagentResult(output, "budget", diagnostic=diagnostic, usage=usage)
            stop = fold.dsh_stop if fold.dsh_stop in ("max-tokens", "refusal") else "error"
            verb = "failed" if state == TaskState.TASK_STATE_FAILED else "rejected"
            why = said or " (no reason given)"
            return SubagentResult(
                output,
                stop,
                diagnostic=f"{name}: the remote agent {verb} the task{why}",
                usage=usage,
            )
        # input-required / auth-required: a one-shot run has no way to answer
        await self._cancel_parked()
        return SubagentResult(
            output,
            "error",
            diagnostic=(
                f"{name}: the remote agent stopped in state {state_name(state)}{said}; a"
                " one-shot a2a run cannot answer it (the remote task was cancelled)"
            ),
            usage=usage,
        )

    async def _cancel_parked(self) -> None:
        client, task_id = self.client, self.fold.task_id
        if client is None or task_id is None:
            return
        with contextlib.suppress(Exception), anyio.fail_after(self.timeouts.cancel_grace or 1):
            await client.cancel_task(CancelTaskRequest(id=task_id))

    def _scrub(self, text: str) -> str:
        for secret in self._secrets:
            if secret:
                text = text.replace(secret, "***")
        return text


def _card_problem(card: AgentCard, config: A2AProviderConfig) -> str | None:
    """What makes ``card`` unusable for ``config`` (None: nothing)."""
    bindings = [_BINDINGS[t] for t in config.transports]
    offered = [i.protocol_binding for i in card.supported_interfaces]
    if not offered:
        return "lists no interface (supportedInterfaces is empty)"
    if not any(binding in offered for binding in bindings):
        return (
            f"offers {', '.join(sorted(set(offered)))}; this provider speaks"
            f" {', '.join(bindings)} (configured in transports)"
        )
    modes = list(card.default_input_modes)
    if modes and not any("text" in mode or "*" in mode for mode in modes):
        return f"accepts no text input (defaultInputModes: {', '.join(modes)})"
    if config.depth_limit and not _honours_depth_limit(card):
        return (
            "does not declare that the agent honours dsh's depth limit (the extension"
            f" {LINEAGE_EXTENSION_URI} with params.depthLimit = true), but the provider is"
            " configured with depth_limit = true; use an agent that does (dsh a2a) or set"
            " depth_limit = false"
        )
    return None


def _honours_depth_limit(card: AgentCard) -> bool:
    return _extension_says(card, "depthLimit")


def _extension_says(card: AgentCard, key: str) -> bool:
    """dsh's extension on ``card`` has ``params.<key> = true``."""
    for extension in card.capabilities.extensions:
        if extension.uri == LINEAGE_EXTENSION_URI:
            params = plain(extension.params)
            return params.get(key) is True
    return False
