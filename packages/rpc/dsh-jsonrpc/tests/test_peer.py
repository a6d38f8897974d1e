"""The peer against another peer in a real child process (tests/peer_child.py): routing,
concurrency, errors both ways, bad lines, oversized lines, dialects, and a peer that
dies mid-request."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from dsh.jsonrpc import (
    INTERNAL_ERROR,
    METHOD_NOT_FOUND,
    Invalid,
    Peer,
    PeerClosed,
    RemoteError,
    classify_message,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

CHILD = Path(__file__).with_name("peer_child.py")
BOUND = 20.0  # generous: the machine is loaded


@asynccontextmanager
async def child(*args: str, **peer: Any) -> AsyncIterator[tuple[Peer, asyncio.subprocess.Process]]:
    """A child peer (``args``: its mode) and our Peer on its stdio, reading."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(CHILD),
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    ours = Peer(process.stdout, process.stdin, name="the child", **peer)
    reader = ours.start()
    try:
        yield ours, process
    finally:
        await ours.aclose()
        assert reader.done()
        if process.returncode is None:
            process.kill()
        await process.wait()


def raw(data: bytes) -> tuple[str, str]:
    return "raw", data.hex()


async def test_concurrent_requests_are_routed_to_their_callers_by_id() -> None:
    async with child("serve") as (peer, _):
        delays = [0.05 * (10 - i) for i in range(10)]  # the last sent is answered first
        started = time.monotonic()
        async with asyncio.timeout(BOUND):
            answers = await asyncio.gather(
                *(peer.request("sleep", {"seconds": d, "i": i}) for i, d in enumerate(delays))
            )
        assert answers == [{"seconds": d, "i": i} for i, d in enumerate(delays)]
        assert time.monotonic() - started < sum(delays)  # not one after another
        assert await peer.request("echo", ["a", 1]) == ["a", 1]


async def test_error_answers_raise_remote_error_with_code_message_and_data() -> None:
    async with child("serve") as (peer, _), asyncio.timeout(BOUND):
        with pytest.raises(RemoteError) as failed:
            await peer.request("fail")
        assert (failed.value.code, failed.value.message) == (-32001, "nope")
        assert failed.value.data == {"why": "asked to"}
        assert failed.value.method == "fail"
        assert str(failed.value) == "fail: nope (code -32001)"
        with pytest.raises(RemoteError) as bug:
            await peer.request("boom")
        assert bug.value.code == INTERNAL_ERROR
        assert bug.value.message == "internal error: ValueError"  # no detail leaks
        with pytest.raises(RemoteError) as unknown:
            await peer.request("nothing/here")
        assert unknown.value.code == METHOD_NOT_FOUND
        assert await peer.request("echo", {"still": "open"}) == {"still": "open"}


async def test_the_other_side_requests_and_notifies_back_in_wire_order() -> None:
    notes: list[Any] = []
    asked: list[Any] = []

    def on_request(message: dict[str, Any]) -> Any:
        asked.append(message["params"])
        return {"pong": message["params"], "notes_so_far": len(notes)}

    async with (
        child("serve", on_request=on_request, on_notification=notes.append) as (peer, _),
        asyncio.timeout(BOUND),
    ):
        answer = await peer.request("ask-back", {"x": 1})
    assert answer == {"pong": {"x": 1}, "notes_so_far": 2}  # both notes came first
    assert [n["params"] for n in notes] == [{"n": 1}, {"n": 2}]
    assert asked == [{"x": 1}]


async def test_a_peer_that_dies_mid_request_fails_every_pending_call_clearly() -> None:
    async with child("serve") as (peer, process):
        waiting = [asyncio.ensure_future(peer.request("sleep", {"seconds": 30})) for _ in range(3)]
        async with asyncio.timeout(BOUND):
            with pytest.raises(PeerClosed) as died:
                await peer.request("die")
            assert await process.wait() == 3
            for call in waiting:
                with pytest.raises(PeerClosed) as gone:
                    await call
                assert str(gone.value) == "the child closed its output; sleep got no answer"
        assert died.value.method == "die"
        assert died.value.reason == "the child closed its output"
        assert peer.closed
        started = time.monotonic()
        with pytest.raises(PeerClosed, match="echo got no answer"):
            await peer.request("echo")  # at once, not after a timeout
        assert time.monotonic() - started < 1


async def test_a_bad_line_ends_the_connection_by_default_and_says_what_it_was() -> None:
    line = b"Loading model...\n" + b'{"jsonrpc":"2.0","id":0,"result":"late"}\n'
    async with child(*raw(line)) as (peer, _):
        with pytest.raises(PeerClosed) as ended:
            async with asyncio.timeout(BOUND):
                await peer.request("echo")
    assert "the child sent a bad line (parse error: Loading model...)" in str(ended.value)
    assert "'Loading model...'" in str(ended.value)


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        (b"not json", "parse"),
        (b"[1, 2]", "invalid"),
        (b'{"jsonrpc":"2.0","id":0,"error":"boom"}', "invalid"),
        (b'{"jsonrpc":"2.0","id":0}', "invalid"),
        (b'{"jsonrpc":"2.0","id":99,"result":{}}', "unexpected-response"),
        (b'{"jsonrpc":"2.0","id":"0","result":{}}', "unexpected-response"),  # "0" is not 0
        (b"x" * 3000, "oversized"),
    ],
)
async def test_bad_lines_can_be_skipped_and_the_next_answer_still_arrives(
    line: bytes, kind: str
) -> None:
    seen: list[Invalid] = []

    def skip(invalid: Invalid) -> None:
        seen.append(invalid)

    data = line + b"\n\n" + b'{"jsonrpc":"2.0","id":0,"result":"ok"}\n'
    async with child(*raw(data), on_invalid=skip, max_line_bytes=1024) as (peer, _):
        async with asyncio.timeout(BOUND):
            assert await peer.request("echo") == "ok"
    assert [i.kind for i in seen] == [kind]
    if kind == "oversized":
        assert seen[0].line == b""
        assert seen[0].reason == "message too large (3000 bytes on one line)"
    else:
        assert seen[0].line == line


async def test_an_oversized_line_ends_the_connection_unless_skipped() -> None:
    data = b"y" * 5000 + b'\n{"jsonrpc":"2.0","id":0,"result":"ok"}\n'
    async with child(*raw(data), max_line_bytes=1024) as (peer, _):
        with pytest.raises(PeerClosed, match=r"message too large \(5000 bytes on one line\)"):
            async with asyncio.timeout(BOUND):
                await peer.request("echo")


async def test_the_late_answer_to_a_request_given_up_on_is_dropped_quietly() -> None:
    seen: list[Invalid] = []

    def strict(invalid: Invalid) -> str:
        seen.append(invalid)
        return invalid.reason

    async with child("serve", on_invalid=strict) as (peer, _):
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await peer.request("sleep", {"seconds": 1.0})
        async with asyncio.timeout(BOUND):
            # answered after the late one: the connection survived it
            assert await peer.request("sleep", {"seconds": 1.5}) == {"seconds": 1.5}
    assert seen == []
    assert not peer.closed or peer.close_reason == "the connection was closed"


async def test_codex_dialect_sends_no_jsonrpc_member_and_reads_messages_without_it() -> None:
    notes: list[Any] = []
    data = b'{"method":"note","params":{"a":1}}\n{"id":0,"result":"bare"}\n'
    async with child(*raw(data), send_version=False, on_notification=notes.append) as (peer, _):
        async with asyncio.timeout(BOUND):
            assert await peer.request("echo") == "bare"
    assert notes == [{"method": "note", "params": {"a": 1}}]
    async with child("record", send_version=False) as (peer, process):
        async with asyncio.timeout(BOUND):
            assert await peer.request("echo", {"b": 2}) == {"b": 2}
        assert process.stderr is not None
        got = (await process.stderr.readline()).decode()
    assert got.strip() == str({"id": 0, "method": "echo", "params": {"b": 2}})


async def test_a_strict_peer_rejects_messages_without_the_jsonrpc_member() -> None:
    seen: list[Invalid] = []
    data = b'{"id":0,"result":"bare"}\n{"jsonrpc":"2.0","id":0,"result":"ok"}\n'
    async with child(*raw(data), require_version=True, on_invalid=seen.append) as (peer, _):
        async with asyncio.timeout(BOUND):
            assert await peer.request("echo") == "ok"
    assert [(i.kind, i.reason) for i in seen] == [("invalid", 'jsonrpc must be "2.0", got nothing')]
    assert classify_message({"id": 0, "result": 1}).kind == "response"
    assert classify_message({"id": 0, "result": 1}, require_version=True).kind == "error"


async def test_a_request_the_other_side_cannot_read_fails_at_once() -> None:
    ready = asyncio.Event()
    notes: list[Any] = []

    def note(message: dict[str, Any]) -> None:
        notes.append(message)
        ready.set()

    async with child("deaf", on_notification=note) as (peer, _):
        async with asyncio.timeout(BOUND):
            await ready.wait()
            lost = await _write_until_it_fails(peer)
        assert "cannot write to the child" in str(lost)
        assert lost.method == "echo"
        assert peer.output_lost is not None
        assert not peer.closed  # reading goes on: answers on their way still arrive


async def test_aclose_fails_pending_calls_and_stops_reading() -> None:
    async with child("serve") as (peer, _):
        pending = asyncio.ensure_future(peer.request("sleep", {"seconds": 30}))
        await asyncio.sleep(0.1)
        await peer.aclose()
        with pytest.raises(PeerClosed, match="the connection was closed; sleep got no answer"):
            await pending
        assert peer.close_reason == "the connection was closed"


async def _write_until_it_fails(peer: Peer) -> PeerClosed:
    for _ in range(100):  # a first write may land before the pipe reports it
        try:
            (await peer.call("echo", "x" * 100_000)).cancel()
        except PeerClosed as exc:
            return exc
    raise AssertionError("writing to a closed pipe kept working")
