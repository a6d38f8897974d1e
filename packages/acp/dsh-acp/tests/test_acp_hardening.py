"""``dsh acp`` under hostile input: strict framing, bounded memory, sessions freed,
signals and end of input handled. A real ``dsh acp`` process, raw bytes on its stdin."""

from __future__ import annotations

import json
import os
import queue
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsh.testing._acp_fixtures import hello_preset
from dsh.testing.fixtures import HANG_RULE
from dsh.testing.processes import JsonLinesProcess

pytestmark = pytest.mark.timeout(240)

PRESET = hello_preset(HANG_RULE, chunks=2)


class RawAcp(JsonLinesProcess):
    """``python -m dsh.cli acp`` with raw lines in and parsed lines out."""

    def __init__(self, tmp_path: Path, *extra: str, preset: str = PRESET) -> None:
        preset_file = tmp_path / "agent.toml"
        preset_file.write_text(preset, encoding="utf-8")
        super().__init__(
            [sys.executable, "-m", "dsh.cli", "acp", "--preset", str(preset_file), *extra],
            tmp_path,
            tmp_path / "dsh-acp.stderr",
            name="dsh acp",
            first_id=1000,
        )


@pytest.fixture
def acp(tmp_path: Path) -> Iterator[RawAcp]:
    server = RawAcp(tmp_path)
    try:
        yield server
    finally:
        server.close()


def initialize(server: RawAcp) -> dict[str, Any]:
    answer = server.answer(server.request("initialize", {"protocolVersion": 1}))
    assert "result" in answer, answer
    return dict(answer["result"])


# -- framing ------------------------------------------------------------------------------

BAD_LINES = [
    (b"[]", -32600),
    (b'[{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}]', -32600),
    (b"5", -32600),
    (b'"x"', -32600),
    (b"true", -32600),
    (b"null", -32600),
    (b"{not json", -32700),
    (b"\xff\xfe garbage", -32700),
    (b'{"jsonrpc":"2.0","id":7}', -32600),
    (b'{"jsonrpc":"2.0","id":{"a":1},"method":"initialize"}', -32600),
    (b'{"jsonrpc":"2.0","id":8,"method":5}', -32600),
    (b'{"jsonrpc":"2.0","id":9,"method":"initialize","params":3}', -32600),
]


def test_every_bad_line_gets_an_error_and_serving_goes_on(acp: RawAcp) -> None:
    for line, code in BAD_LINES:
        acp.send(line + b"\n")
        answer = acp.receive()
        assert answer["error"]["code"] == code, (line, answer)
        assert answer["jsonrpc"] == "2.0"
    assert initialize(acp)["protocolVersion"] == 1
    assert acp.process.poll() is None


def test_initialize_advertises_the_depth_limit_and_session_close(acp: RawAcp) -> None:
    capabilities = initialize(acp)["agentCapabilities"]
    assert capabilities["_meta"]["dsh"]["depthLimit"] is True
    assert "close" in capabilities["sessionCapabilities"]


def test_a_line_over_the_cap_is_answered_and_memory_stays_bounded(tmp_path: Path) -> None:
    server = RawAcp(tmp_path, "--max-line-bytes", str(1024 * 1024))
    try:
        initialize(server)
        before = server.rss_kib()
        chunk = b"x" * (1024 * 1024)
        for _ in range(64):  # one 64 MiB line, no newline until the end
            server.send(chunk)
        server.send(b"\n")
        answer = server.receive()
        assert answer["error"]["code"] == -32600
        assert "message too large" in answer["error"]["message"]
        assert server.rss_kib() - before < 32 * 1024, "the runaway line was buffered"
        initialize(server)
    finally:
        assert server.close() == 0


# -- sessions -----------------------------------------------------------------------------


def test_session_close_frees_the_session(acp: RawAcp, tmp_path: Path) -> None:
    initialize(acp)
    new = acp.answer(acp.request("session/new", {"cwd": str(tmp_path), "mcpServers": []}))
    session_id = new["result"]["sessionId"]
    closed = acp.answer(acp.request("session/close", {"sessionId": session_id}))
    assert "result" in closed, closed
    prompt = {"sessionId": session_id, "prompt": [{"type": "text", "text": "hi"}]}
    gone = acp.answer(acp.request("session/prompt", prompt))
    assert gone["error"]["code"] == -32602
    assert "unknown session" in json.dumps(gone["error"])


def test_idle_sessions_are_closed(tmp_path: Path) -> None:
    server = RawAcp(tmp_path, "--session-idle", "0.3")
    try:
        initialize(server)
        new = server.answer(server.request("session/new", {"cwd": str(tmp_path), "mcpServers": []}))
        session_id = new["result"]["sessionId"]
        time.sleep(1.0)
        prompt = {"sessionId": session_id, "prompt": [{"type": "text", "text": "hi"}]}
        gone = server.answer(server.request("session/prompt", prompt))
        assert gone["error"]["code"] == -32602
    finally:
        assert server.close() == 0


def test_beyond_max_sessions_the_least_recently_used_is_closed(tmp_path: Path) -> None:
    server = RawAcp(tmp_path, "--max-sessions", "3")
    try:
        initialize(server)
        ids = []
        for _ in range(5):
            new = server.answer(
                server.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})
            )
            ids.append(new["result"]["sessionId"])
        for session_id, alive in zip(ids, [False, False, True, True, True], strict=True):
            prompt = {"sessionId": session_id, "prompt": [{"type": "text", "text": "hi"}]}
            answer = server.answer(server.request("session/prompt", prompt))
            assert ("result" in answer) == alive, (session_id, answer)
    finally:
        assert server.close() == 0


# -- ending ------------------------------------------------------------------------------


def _start_hanging_turn(server: RawAcp, tmp_path: Path) -> int:
    initialize(server)
    new = server.answer(server.request("session/new", {"cwd": str(tmp_path), "mcpServers": []}))
    prompt = {"sessionId": new["result"]["sessionId"], "prompt": [{"type": "text", "text": "hang"}]}
    request_id = server.request("session/prompt", prompt)
    time.sleep(0.3)
    return request_id


def test_end_of_input_from_a_live_client_cancels_at_once(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    server = RawAcp(tmp_path, "--sessions-dir", str(sessions))
    _start_hanging_turn(server, tmp_path)
    wait_until(lambda: "turn/start" in _session_text(sessions), "the turn to start")
    started = time.monotonic()
    assert server.close() == 0
    assert time.monotonic() - started < 60
    # Ended at once because the client went away, not after the drain grace a file
    # input gets ("dsh acp's input ended 2 s ago"): the turn's recorded cause says which
    # (a cause, not a clock, so a busy machine cannot blur the two).
    ends = [
        json.loads(line) for line in _session_text(sessions).splitlines() if '"turn/end"' in line
    ]
    assert [end["data"].get("error") for end in ends] == ["the ACP client went away"], ends


def _session_text(sessions: Path) -> str:
    return "".join(path.read_text() for path in sorted(sessions.rglob("*.jsonl")))


def wait_until(condition: Callable[[], bool], what: str, within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, f"waited {within} s for {what}"
        time.sleep(0.02)


def test_sigterm_cancels_the_turn_and_exits(acp: RawAcp, tmp_path: Path) -> None:
    request_id = _start_hanging_turn(acp, tmp_path)
    started = time.monotonic()
    acp.process.send_signal(signal.SIGTERM)
    assert acp.process.wait(timeout=10) == 128 + signal.SIGTERM
    assert time.monotonic() - started < 3.0
    answered = [m for m in _drain(acp) if m.get("id") == request_id]
    assert answered == [] or answered[0].get("result", {}).get("stopReason") == "cancelled"


def test_cancel_request_cancels_a_prompt(acp: RawAcp, tmp_path: Path) -> None:
    request_id = _start_hanging_turn(acp, tmp_path)
    acp.send(
        json.dumps(
            {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"id": request_id}}
        ).encode()
        + b"\n"
    )
    answer = acp.answer(request_id, timeout=10)
    assert answer["result"]["stopReason"] == "cancelled"


def _drain(server: RawAcp) -> list[Any]:
    found = []
    while True:
        try:
            message = server.lines.get(timeout=2)
        except queue.Empty:
            return found
        if message is None:
            return found
        found.append(message)


# -- lineage ------------------------------------------------------------------------------


def test_a_child_beyond_its_depth_limit_is_refused(acp: RawAcp, tmp_path: Path) -> None:
    initialize(acp)
    params = {"cwd": str(tmp_path), "mcpServers": [], "_meta": {"dsh": {"depth": 4, "maxDepth": 3}}}
    answer = acp.answer(acp.request("session/new", params))
    assert answer["error"]["code"] == -32602
    assert "subagent depth 4 exceeds max_depth 3" in json.dumps(answer["error"])
    params["_meta"] = {"dsh": {"depth": "deep"}}
    answer = acp.answer(acp.request("session/new", params))
    assert "_meta.dsh.depth must be a non-negative integer" in json.dumps(answer["error"])


# -- fuzzing ------------------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
METHODS = st.sampled_from(
    [
        "initialize",
        "session/new",
        "session/load",
        "session/prompt",
        "session/cancel",
        "session/close",
        "session/set_mode",
        "authenticate",
        "_dsh/unknown",
        "$/cancel_request",
        "nope",
    ]
)
IDS = st.integers(min_value=1, max_value=10**9) | st.text(min_size=1, max_size=12)
REQUEST = st.fixed_dictionaries(
    {"jsonrpc": st.just("2.0"), "id": IDS, "method": METHODS},
    optional={
        "params": st.dictionaries(
            st.sampled_from(["cwd", "sessionId", "prompt", "protocolVersion", "mcpServers"]),
            JSON,
            max_size=4,
        )
    },
)
FRAME = st.one_of(
    REQUEST.map(lambda m: ("request", m)),
    JSON.map(lambda v: ("value", v)),
    st.binary(max_size=40).map(lambda b: ("bytes", b)),
    st.fixed_dictionaries({"jsonrpc": st.just("2.0"), "method": METHODS}).map(
        lambda m: ("note", m)
    ),
)


@pytest.fixture(scope="module")
def fuzz_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RawAcp]:
    folder = tmp_path_factory.mktemp("fuzz")
    server = RawAcp(folder, "--max-sessions", "16")
    initialize(server)
    server.sent = 0  # type: ignore[attr-defined]
    server.base_rss = server.rss_kib()  # type: ignore[attr-defined]
    try:
        yield server
        assert server.sent >= 10_000  # type: ignore[attr-defined]
        assert server.process.poll() is None, server.stderr()
        growth = server.rss_kib() - server.base_rss  # type: ignore[attr-defined]
        assert growth < 64 * 1024, f"RSS grew by {growth} KiB"
    finally:
        assert server.close() == 0, server.stderr()


@settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(frames=st.lists(FRAME, min_size=50, max_size=50))
def test_fuzzed_frames_never_kill_or_hang_dsh_acp(fuzz_target: RawAcp, frames: list[Any]) -> None:
    server = fuzz_target
    expected_ids: list[Any] = []
    expected_errors = 0
    payload = bytearray()
    for kind, frame in frames:
        if kind == "request":
            frame = dict(frame)
            if frame["method"] == "session/prompt":  # no model turns in the fuzz: unknown ids
                frame["params"] = {"sessionId": "fuzz-unknown", "prompt": []}
            if frame["method"] == "$/cancel_request":
                expected_ids.append(frame["id"])
            else:
                expected_ids.append(frame["id"])
            line = json.dumps(frame).encode()
        elif kind == "note":
            line = json.dumps(frame).encode()
        elif kind == "value":
            line = json.dumps(frame).encode()
            if not (isinstance(frame, dict) and ("method" not in frame) and "id" in frame):
                expected_errors += 0 if isinstance(frame, dict) else 1
        else:
            line = frame.replace(b"\n", b" ")
        payload += line + b"\n"
    server.send(bytes(payload))
    server.sent += len(frames)  # type: ignore[attr-defined]
    # every request is answered, by id (ids may repeat within a batch of frames)
    pending: dict[str, int] = {}
    for request_id in expected_ids:
        key = json.dumps(request_id)
        pending[key] = pending.get(key, 0) + 1
    errors_without_id = 0
    deadline = time.monotonic() + 30
    while pending and time.monotonic() < deadline:
        message = server.receive(timeout=max(deadline - time.monotonic(), 0.01))
        if "method" in message:
            continue  # a notification (session updates)
        key = json.dumps(message.get("id"))
        if key in pending:
            pending[key] -= 1
            if not pending[key]:
                del pending[key]
        elif message.get("id") is None:
            errors_without_id += 1
    assert not pending, f"unanswered requests: {pending}"
    assert server.process.poll() is None, server.stderr()
    while True:  # the rest of the id-less errors, before the next example
        try:
            extra = server.lines.get(timeout=0.2)
        except queue.Empty:
            break
        assert extra is not None, server.stderr()
        if "method" not in extra and extra.get("id") is None:
            errors_without_id += 1
    assert errors_without_id >= expected_errors


def test_non_object_lines_each_get_their_own_error(acp: RawAcp) -> None:
    lines = [b"[]", b"5", b"null", b"{", b"true"] * 20
    acp.send(b"\n".join(lines) + b"\n")
    answers = [acp.receive() for _ in lines]
    assert all(a["id"] is None and a["error"]["code"] in (-32600, -32700) for a in answers)
    assert os.path.exists(f"/proc/{acp.process.pid}")
