"""The parts that need no server: config, result store, journal, live progress, ids."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from dsh.subagent import Budget, SubagentProgress, SubagentUsage
from dsh.subagent_temporal import (
    DelegationJournal,
    DirectoryResultStore,
    StoreError,
    TemporalProvider,
    TemporalProviderConfig,
    open_store,
)
from dsh.subagent_temporal._budget import Earlier, attempt_budget
from dsh.subagent_temporal._live import (
    ITEM_BYTES,
    TAIL_BYTES,
    WINDOW_BYTES,
    ProgressReader,
    ProgressWindow,
)
from dsh.subagent_temporal._spec import BlobRef, blob_key, split_run_id
from dsh.subagent_temporal._store import read_blob, write_blob

# -- config ------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["api_key", "tls", "tls_cert", "client_key"])
def test_credentials_cannot_be_set_in_a_preset(key: str) -> None:
    with pytest.raises(ValidationError, match="environment only"):
        TemporalProviderConfig.model_validate({key: "secret"})


def test_defaults_follow_the_heartbeat_timeout() -> None:
    config = TemporalProviderConfig(heartbeat_timeout=4)
    assert config.cancel_grace == 5.5
    assert config.turn_timeout is None
    assert TemporalProviderConfig(heartbeat_timeout=4, cancel_grace=1).cancel_grace == 1


def test_capabilities_are_the_inner_providers() -> None:
    spawn = TemporalProvider(TemporalProviderConfig(provider="spawn")).capabilities
    assert spawn.output_schema
    assert spawn.depth_limit
    assert spawn.tool_filter
    assert spawn.persona
    acp = TemporalProvider(TemporalProviderConfig(provider="acp")).capabilities
    assert not (acp.output_schema)
    assert not (acp.depth_limit)
    assert not (acp.tool_filter)
    assert not (acp.persona)
    some = TemporalProvider(
        TemporalProviderConfig(provider="acp", capabilities=["depth_limit"])
    ).capabilities
    assert some.depth_limit
    assert not some.persona


def test_address_must_be_host_and_port() -> None:
    with pytest.raises(ValidationError):
        TemporalProviderConfig(address="https://temporal.example:7233")
    assert TemporalProviderConfig(address="temporal:7233").address == "temporal:7233"


# -- result store ------------------------------------------------------------------------


@pytest.mark.anyio
async def test_directory_store_round_trip_and_verification(tmp_path: Path) -> None:
    store = DirectoryResultStore(tmp_path)
    data = os.urandom(100_000)
    ref = await write_blob(store, blob_key("dsh-1/7", "result-1.json"), data)
    assert ref.size == len(data)
    assert ref.sha256 == hashlib.sha256(data).hexdigest()
    assert await read_blob(store, ref) == data
    with pytest.raises(StoreError, match="not the one referenced"):
        await read_blob(store, BlobRef(ref.key, ref.size, "0" * 64))
    await store.delete(ref.key)
    with pytest.raises(StoreError, match="nothing under"):
        await store.get(ref.key)
    assert list(tmp_path.iterdir()) == []  # the run's folder went with its last body


@pytest.mark.anyio
@pytest.mark.parametrize("key", ["../escape", "a/../../b", "", "/abs", "a//b"])
async def test_store_keys_cannot_leave_the_directory(tmp_path: Path, key: str) -> None:
    with pytest.raises(StoreError, match="invalid"):
        await DirectoryResultStore(tmp_path / "store").put(key, b"x")


def test_blob_keys_are_file_names() -> None:
    assert blob_key("dsh-ab/3", "result 1.json") == "dsh-ab_3/result_1.json"
    assert blob_key("..", "x") == "run/x"


def test_prune_removes_old_bodies(tmp_path: Path) -> None:
    store = DirectoryResultStore(tmp_path)
    old = tmp_path / "run" / "old.json"
    old.parent.mkdir()
    old.write_bytes(b"x")
    past = time.time() - 3600
    os.utime(old, (past, past))
    (tmp_path / "run" / "new.json").write_bytes(b"y")
    assert store.prune(60) == 1
    assert [p.name for p in (tmp_path / "run").iterdir()] == ["new.json"]


def test_open_store_forms(tmp_path: Path) -> None:
    assert open_store(None) is None
    by_url = open_store(f"file://{tmp_path}")
    assert isinstance(by_url, DirectoryResultStore)
    assert by_url.directory == tmp_path
    assert isinstance(open_store(str(tmp_path)), DirectoryResultStore)
    with pytest.raises(ValueError, match="not a ResultStore"):
        open_store("os:sep")


def test_open_store_rejects_what_it_cannot_use() -> None:
    with pytest.raises(ValueError, match="only local file URLs"):
        open_store("file://elsewhere/dir")
    with pytest.raises(ValueError, match="expected"):
        open_store("relative/dir")


# -- journal -----------------------------------------------------------------------------


def test_journal_outstanding_is_started_minus_collected(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    journal = DelegationJournal(path)
    journal.started("r1", parent_session="p1", label="a", provider="temporal")
    journal.started("r2", parent_session="p2", label=None, provider="temporal")
    journal.started("r3", parent_session="p1", label=None, provider="temporal")
    journal.collected("r1", "completed")
    with path.open("a") as out:
        out.write('{"op": "collected", "run": "r3"')  # a line cut by a crash
    again = DelegationJournal(path)
    assert [e["run"] for e in again.outstanding()] == ["r2", "r3"]
    assert [e["run"] for e in again.outstanding("p1")] == ["r3"]


# -- live progress -----------------------------------------------------------------------


def test_window_merges_unsent_text_and_numbers_items() -> None:
    window = ProgressWindow(1, "w")
    window.add(SubagentProgress("text", text="Hel"))
    window.add(SubagentProgress("text", text="lo"))
    sent = window.details()
    assert [(e["seq"], e["item"]["text"]) for e in sent["items"]] == [(1, "Hello")]
    window.add(SubagentProgress("text", text=" again"))  # the first one went out
    window.add(SubagentProgress("usage", usage=SubagentUsage(3, 4)))
    details = window.details()
    assert [e["seq"] for e in details["items"]] == [1, 2, 3]
    assert details["usage"] == {"input_tokens": 3, "output_tokens": 4}
    assert (details["attempt"], details["worker"]) == (1, "w")


def test_window_is_bounded() -> None:
    window = ProgressWindow(1, "w")
    window.add(SubagentProgress("text", text="x" * 1_000_000))
    for number in range(500):
        window.add(SubagentProgress("tool_call", tool_call_id=str(number), name="t"))
    details = window.details()
    size = len(json.dumps(details["items"], separators=(",", ":")))
    assert size <= WINDOW_BYTES + 2000
    assert details["items"][-1]["seq"] == 501
    assert len(json.dumps(window.tail(), separators=(",", ":"))) <= TAIL_BYTES
    huge = ProgressWindow(1, "w")
    huge.add(SubagentProgress("tool_call", arguments={"blob": "y" * 100_000}))
    (entry,) = huge.details()["items"]
    assert len(json.dumps(entry["item"])) <= ITEM_BYTES
    assert "omitted" in entry["item"]["arguments"]


def test_a_retried_window_reports_every_attempts_spend() -> None:
    earlier = Earlier.of(
        [{"usage": {"input_tokens": 90, "output_tokens": 10}, "spent": {"tokens": 100, "turns": 1}}]
    )
    window = ProgressWindow(2, "w", earlier)
    window.add(SubagentProgress("usage", usage=SubagentUsage(180, 20)))
    details = window.details()
    assert details["usage"] == {"input_tokens": 270, "output_tokens": 30}
    assert details["spent"] == {"tokens": 300, "turns": 1}  # (no meter: tokens from usage)
    # the next attempt reads this heartbeat back
    again = Earlier.of([details])
    assert again.spent == {"tokens": 300, "turns": 1}
    assert again.plus(None) == SubagentUsage(270, 30)


def test_earlier_ignores_what_is_not_a_heartbeat_of_ours() -> None:
    assert Earlier.of([]) == Earlier()
    assert Earlier.of(["junk"]) == Earlier()
    odd = Earlier.of([{"usage": "x", "spent": {"tokens": "many", "turns": True, "usd": -1}}])
    assert (odd.usage, odd.spent) == (None, {})


@pytest.mark.anyio
async def test_an_attempt_gets_the_budget_less_what_came_before() -> None:
    budget = Budget(tokens=500, usd=1.0, seconds=60, children=3, turns=10)
    assert attempt_budget(budget, Earlier(), 0.0) is budget  # a first attempt
    earlier = Earlier(spent={"tokens": 200, "usd": 0.25, "turns": 2, "children": 1})
    left = attempt_budget(budget, earlier, 10.0)
    assert isinstance(left, Budget)
    assert (left.tokens, left.usd, left.turns, left.children) == (300, 0.75, 8, 2)
    assert left.seconds is not None
    assert 49 < left.seconds <= 50
    assert attempt_budget(Budget(tokens=500), Earlier(spent={"tokens": 520}), 0.0) == (
        "token budget 500 reached: 520 tokens used (by the delegation's earlier attempts)"
    )
    late = attempt_budget(Budget(seconds=5), Earlier(), 6.0)
    assert isinstance(late, str)
    assert late.startswith("time budget 5 s reached: 6.0 s elapsed")
    # a children cap they used up is no stop: the attempt may just not delegate
    assert attempt_budget(Budget(children=1), Earlier(spent={"children": 1}), 0.0) == Budget(
        children=0
    )


def test_budget_is_a_capability_of_in_process_inner_providers() -> None:
    assert TemporalProvider(TemporalProviderConfig()).capabilities.budget
    assert not TemporalProvider(TemporalProviderConfig(provider="acp")).capabilities.budget
    acp = TemporalProviderConfig(provider="acp", capabilities=["depth_limit", "budget"])
    assert TemporalProvider(acp).capabilities.budget


def test_reader_emits_each_item_once_and_reports_gaps_and_attempts() -> None:
    reader = ProgressReader()
    seen: list[SubagentProgress] = []

    def entries(*seqs: int) -> list[dict[str, object]]:
        return [{"seq": s, "item": {"kind": "text", "path": [], "text": str(s)}} for s in seqs]

    reader.feed(1, "w1", entries(1, 2), {"input_tokens": 1}, seen.append)
    reader.feed(1, "w1", entries(1, 2, 3), None, seen.append)
    reader.feed(1, "w1", entries(6, 7), None, seen.append)
    reader.feed(2, "w2", entries(1), None, seen.append)
    texts = [(item.kind, item.text) for item in seen]
    assert texts[0] == ("notice", "running on worker w1")
    assert texts[1:4] == [("text", "1"), ("text", "2"), ("text", "3")]
    assert texts[4][0] == "notice"
    assert texts[4][1].startswith("2 progress item(s)")
    assert texts[5:7] == [("text", "6"), ("text", "7")]
    assert texts[7][0] == "notice"
    assert "attempt 2 running on worker w2" in texts[7][1]
    assert texts[8] == ("text", "1")
    assert reader.dropped == 2
    assert reader.usage is not None
    assert reader.usage.input_tokens == 1


def test_run_ids_name_their_workflow_and_activity() -> None:
    assert split_run_id("dsh-abc") == ("dsh-abc", "child")
    assert split_run_id("dsh-abc/17") == ("dsh-abc", "17")


# -- the docs page -----------------------------------------------------------------------

DOCS = Path(__file__).resolve().parents[4] / "docs" / "providers" / "temporal.md"


def test_the_docs_presets_load() -> None:
    from dsh.core import parse_preset
    from dsh.testing.docs import extract_blocks

    blocks = extract_blocks(DOCS, ["toml"])
    assert blocks
    for block in blocks:
        preset = parse_preset(block.code)
        for _index, row in preset.enabled_rows():
            if row.name == "dsh-subagent-temporal":
                TemporalProviderConfig.model_validate(row.config)


def test_the_docs_python_compiles() -> None:
    from dsh.testing.docs import extract_blocks

    for block in extract_blocks(DOCS, ["python"]):
        compile("async def _sample():\n" + _indent(block.code), block.where, "exec")


def _indent(code: str) -> str:
    return "".join(f"    {line}\n" for line in code.splitlines())
