"""An A2A agent written with the A2A SDK alone (no dsh code): what the ``a2a`` provider
is tested against. Run: ``python sdk_agent.py [--no-streaming] [--grpc-only]``; it prints
``sdk agent listening on URL`` on stderr, then serves until SIGTERM.

What it does with a message, by its text:

* ``hang`` — working, then waits until the task is cancelled;
* ``fail`` — working, then failed ("the sdk agent cannot do that");
* ``reject`` — rejected ("not my kind of task");
* ``input`` — input-required ("which file do you mean?");
* ``direct`` — answers with a message, no task;
* ``lineage`` — answers with the depth and limit it found in ``metadata.dsh``;
* anything else — working ("Thinking..."), the answer ``Echo: <text>`` streamed as
  two chunks of one artifact, completed.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
import uuid

import uvicorn
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Message,
    Part,
    Role,
    Task,
    TaskState,
    TaskStatus,
)
from google.protobuf.json_format import MessageToDict
from starlette.applications import Starlette


def say(updater: TaskUpdater, text: str) -> Message:
    return updater.new_agent_message([Part(text=text)])


class SdkAgent(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = context.get_user_input()
        task_id, context_id = context.task_id or "", context.context_id or ""
        if "direct" in text:
            await event_queue.enqueue_event(
                Message(
                    role=Role.ROLE_AGENT,
                    message_id=uuid.uuid4().hex,
                    context_id=context_id,
                    parts=[Part(text=f"Direct: {text}")],
                )
            )
            return
        await event_queue.enqueue_event(
            Task(
                id=task_id,
                context_id=context_id,
                status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                history=[context.message] if context.message else [],
            )
        )
        updater = TaskUpdater(event_queue, task_id, context_id)
        if "reject" in text:
            await updater.reject(updater.new_agent_message([Part(text="not my kind of task")]))
            return
        await updater.start_work(updater.new_agent_message([Part(text="Thinking...")]))
        if "hang" in text:
            await asyncio.Event().wait()
        if "fail" in text:
            await updater.failed(say(updater, "the sdk agent cannot do that"))
            return
        if "input" in text:
            await updater.requires_input(say(updater, "which file do you mean?"))
            return
        if "lineage" in text:
            meta = MessageToDict(context.message.metadata) if context.message else {}
            dsh = meta.get("dsh", {})
            answer = f"depth={dsh.get('depth')} max={dsh.get('maxDepth')}"
            await updater.add_artifact([Part(text=answer)], artifact_id="answer", last_chunk=True)
            await updater.complete()
            return
        await updater.add_artifact([Part(text="Echo: ")], artifact_id="answer")
        await asyncio.sleep(0.01)
        await updater.add_artifact(
            [Part(text=text)], artifact_id="answer", append=True, last_chunk=True
        )
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        await updater.cancel(updater.new_agent_message([Part(text="stopped as asked")]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--no-streaming", action="store_true")
    parser.add_argument("--grpc-only", action="store_true")
    args = parser.parse_args()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
    binding, where = ("GRPC", "127.0.0.1:1") if args.grpc_only else ("JSONRPC", url)
    card = AgentCard(
        name="sdk echo agent",
        description="An A2A agent built with the SDK alone.",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=where, protocol_binding=binding, protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=not args.no_streaming),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="echo", description="Echoes.", tags=["echo"])],
    )
    handler = DefaultRequestHandler(
        agent_executor=SdkAgent(), task_store=InMemoryTaskStore(), agent_card=card
    )
    app = Starlette(
        routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, rpc_url="/")]
    )
    print(f"sdk agent listening on {url}", file=sys.stderr, flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    asyncio.run(server.serve(sockets=[sock]))


if __name__ == "__main__":
    main()
