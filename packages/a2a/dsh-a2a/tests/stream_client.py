"""A caller of ``dsh a2a`` in a process of its own (for tests that kill it): streams one
message with the A2A SDK's client and prints every event as one JSON line on stdout.

``python stream_client.py URL TEXT [--protocol 1.0|0.3]``: ``1.0`` is the SDK's client
as its factory makes it from the agent card; ``0.3`` is the SDK's A2A 0.3 client (its
``CompatJsonRpcTransport``, speaking ``message/stream``) at the card's 0.3 ``url``,
after checking the card as a 0.3 client does (the 0.3 ``AgentCard`` model).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from collections.abc import AsyncIterator

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.compat.v0_3 import types as types_v03
from a2a.compat.v0_3.jsonrpc_transport import CompatJsonRpcTransport
from a2a.types import Message, Part, Role, SendMessageRequest, StreamResponse
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from google.protobuf.json_format import MessageToDict


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("text")
    parser.add_argument("--protocol", choices=["1.0", "0.3"], default="1.0")
    args = parser.parse_args()
    message = Message(
        role=Role.ROLE_USER, message_id=uuid.uuid4().hex, parts=[Part(text=args.text)]
    )
    request = SendMessageRequest(message=message)
    events: AsyncIterator[StreamResponse]
    async with httpx.AsyncClient(timeout=httpx.Timeout(30, read=None)) as http:
        if args.protocol == "0.3":
            raw = (await http.get(args.url.rstrip("/") + AGENT_CARD_WELL_KNOWN_PATH)).json()
            card = types_v03.AgentCard.model_validate(raw)
            transport = CompatJsonRpcTransport(http, None, card.url, is_shared_httpx=True)
            events = transport.send_message_streaming(request)
        else:
            resolved = await A2ACardResolver(http, args.url).get_agent_card()
            client = ClientFactory(ClientConfig(httpx_client=http)).create(resolved)
            events = client.send_message(request)
        async for event in events:
            print(json.dumps(MessageToDict(event)), flush=True)
    print(json.dumps({"end": True}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
    sys.exit(0)
