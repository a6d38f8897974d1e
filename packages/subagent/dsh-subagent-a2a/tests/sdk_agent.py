"""An A2A agent written with the A2A SDK alone (no dsh code): what the ``a2a`` provider
is tested against. Run: ``python sdk_agent.py [--no-streaming] [--grpc-only] [--v03]``; it
prints ``sdk agent listening on URL`` on stderr, then serves until SIGTERM. With ``--v03``
it is an A2A 0.3 agent: its card has only the 0.3 fields (``url``, ``protocolVersion:
0.3.0``...) and it answers the 0.3 methods (``message/send``, ``tasks/cancel``...; the
SDK's 0.3 compatibility layer).

What it does with a message, by its text:

* ``hang`` — working, then waits until the task is cancelled;
* ``fail`` — working, then failed ("the sdk agent cannot do that");
* ``reject`` — rejected ("not my kind of task");
* ``input`` — input-required ("which file do you mean?");
* ``direct`` — answers with a message, no task;
* ``steps`` — working ("Thinking..."), then "step 1", "step 2", "step 3" in quick
  succession, a pause of 1.5 s, then the echo as below;
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
from a2a.compat.v0_3.conversions import to_compat_agent_card
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
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from google.protobuf.json_format import MessageToDict
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


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
        if "steps" in text:
            for step in (1, 2, 3):
                await updater.update_status(
                    TaskState.TASK_STATE_WORKING, say(updater, f"step {step}")
                )
                await asyncio.sleep(0.02)
            await asyncio.sleep(1.5)
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
    parser.add_argument("--v03", action="store_true")
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
            AgentInterface(
                url=where, protocol_binding=binding, protocol_version="0.3.0" if args.v03 else "1.0"
            )
        ],
        capabilities=AgentCapabilities(streaming=not args.no_streaming),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="echo", description="Echoes.", tags=["echo"])],
    )
    handler = DefaultRequestHandler(
        agent_executor=SdkAgent(), task_store=InMemoryTaskStore(), agent_card=card
    )
    card_routes = create_agent_card_routes(card)
    if args.v03:  # the card as a 0.3 agent serves it: the 0.3 fields only
        legacy = to_compat_agent_card(card).model_dump(
            by_alias=True, exclude_none=True, mode="json"
        )

        async def legacy_card(_request: Request) -> JSONResponse:
            return JSONResponse(legacy)

        card_routes = [Route(AGENT_CARD_WELL_KNOWN_PATH, legacy_card, methods=["GET"])]
    rpc = create_jsonrpc_routes(handler, rpc_url="/", enable_v0_3_compat=args.v03)
    app = Starlette(routes=[*card_routes, *rpc])
    print(f"sdk agent listening on {url}", file=sys.stderr, flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    asyncio.run(server.serve(sockets=[sock]))


if __name__ == "__main__":
    main()
