"""A stand-in for ``codex app-server`` that misbehaves on purpose.

Usage: python fake_app_server.py MODE [codex arguments, ignored]

* ``silent`` — reads stdin and never answers anything;
* ``silent-turn`` — answers the handshake, never answers ``turn/start``;
* ``exit-mid-turn`` — answers the handshake and ``turn/start``, streams one text
  delta, writes its last words to stderr and exits with status 3.
"""

from __future__ import annotations

import json
import sys

THREAD = "thread-fake"
TURN = "turn-fake"


def send(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main() -> int:
    mode = sys.argv[1]
    for line in sys.stdin:
        if mode == "silent":
            continue
        message = json.loads(line)
        method, request_id = message.get("method"), message.get("id")
        if method == "initialize":
            send({"id": request_id, "result": {"userAgent": "fake/0"}})
        elif method == "thread/start":
            send({"id": request_id, "result": {"thread": {"id": THREAD}}})
        elif method == "turn/start" and mode == "exit-mid-turn":
            send({"id": request_id, "result": {"turn": {"id": TURN, "status": "inProgress"}}})
            delta = {"threadId": THREAD, "turnId": TURN, "itemId": "m1", "delta": "Half an ans"}
            send({"method": "item/agentMessage/delta", "params": delta})
            sys.stderr.write("fatal: the fake app-server gave up mid-turn\n")
            return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
