"""A stdio relay in front of the real codex app-server that injects one server request.

Usage: python inject_server_request.py LOG METHOD CODEX_ARGV...

With METHOD ``fail-turn-start`` the relay instead answers the client's ``turn/start``
itself with a JSON-RPC error (codex never sees it).

Everything is relayed both ways unchanged, except: right after codex's answer to
``turn/start`` is relayed, the relay sends the client a server request ``METHOD``
(as codex would, with the thread id and an id codex never uses). The client's
answer to it is written to LOG (``{"answer": ...}``) instead of being relayed, and so
is the status of codex's ``turn/completed`` (``{"turn_completed": status}``). Codex 0.171
sends none of its server requests for an unknown method, so this is how the test
makes the real stack meet one.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading

INJECTED_ID = "dsh-test-injected-1"


def main() -> int:
    log_path, method, *argv = sys.argv[1:]
    codex = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert codex.stdin is not None
    assert codex.stdout is not None
    out_lock = threading.Lock()
    turn_start: dict[str, object] = {}

    def record(entry: dict[str, object]) -> None:
        with out_lock, open(log_path, "a", encoding="utf-8") as log:
            log.write(json.dumps(entry) + "\n")

    def to_client(line: bytes) -> None:
        with out_lock:
            sys.stdout.buffer.write(line)
            sys.stdout.buffer.flush()

    def from_codex() -> None:
        assert codex.stdout is not None
        for line in codex.stdout:
            to_client(line)
            message = json.loads(line)
            if message.get("method") == "turn/completed":
                record({"turn_completed": message["params"]["turn"]["status"]})
            if "method" not in message and message.get("id") == turn_start.get("id"):
                params = {"threadId": turn_start["threadId"], "note": "injected by the test"}
                request = {"id": INJECTED_ID, "method": method, "params": params}
                to_client((json.dumps(request) + "\n").encode())

    pump = threading.Thread(target=from_codex, daemon=True)
    pump.start()
    for line in sys.stdin.buffer:
        message = json.loads(line)
        if message.get("id") == INJECTED_ID and "method" not in message:
            record({"answer": message})
            continue
        if message.get("method") == "turn/start":
            if method == "fail-turn-start":
                error = {"code": -32600, "message": "injected turn/start failure"}
                to_client((json.dumps({"id": message["id"], "error": error}) + "\n").encode())
                continue
            turn_start.update(id=message["id"], threadId=message["params"]["threadId"])
        codex.stdin.write(line)
        codex.stdin.flush()
    codex.stdin.close()
    code = codex.wait()
    pump.join(1)
    return code


if __name__ == "__main__":
    sys.exit(main())
