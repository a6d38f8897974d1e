"""A three-hop tree on loopback: parent → ``a2a`` → a ``dsh a2a`` server whose agent
delegates to a spawn child. The parent's ``progress()`` shows the grandchild's own
``child_start``, text and ``child_end`` with the one-element path naming it, and the
result's usage is the remote tree's."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from dsh.testing.conformance import assert_no_new_processes
from dsh.testing.fixtures import (
    SPAWN_SUBAGENT_TOOL,
    assert_one_grandchild,
    calling_replies,
    delegate_rule,
    keyed_preset,
    keyed_preset_file,
    plugin_rows,
    progress_and_result,
)
from dsh.testing.processes import live_children

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

SERVED = keyed_preset(
    delegate_rule("inner work"),
    default=[{"text": "grandchild says {prompt}", "chunks": 3}],
    plugins=SPAWN_SUBAGENT_TOOL,
)


async def test_the_parent_sees_the_grandchild_with_its_path(
    rig: Any, tmp_path: Path, kit: Any
) -> None:
    preset = tmp_path / "served.toml"
    preset.write_text(SERVED)
    server = kit.start_dsh_a2a(tmp_path, preset)
    before = live_children()
    try:
        name = rig.register(server.url, depth_limit=True)
        run = await rig.start(name, "delegate please", max_depth=3)
        items, result = await progress_and_result(run)
    finally:
        assert server.stop() == 143
    assert result.stop_reason == "completed", result
    assert result.output == "child done: grandchild says inner work"

    own = [i for i in items if i.path == ()]
    own_text = "".join(i.text or "" for i in own if i.kind == "text")
    assert own_text == "Delegating.child done: grandchild says inner work"
    calls = [i for i in own if i.kind == "tool_call"]
    assert [(c.name, c.arguments["description"]) for c in calls] == [("subagent", "inner")]
    updates = [i for i in own if i.kind == "tool_update"]
    assert [(u.tool_call_id, u.status) for u in updates] == [(calls[0].tool_call_id, "completed")]

    assert_one_grandchild(items, provider="spawn", label="inner", text="grandchild says inner work")

    # tree-wide usage: the served agent's two model calls (1 + 6 words) and the grandchild's (4)
    assert result.usage.output_tokens == 11
    assert not result.usage.incomplete
    assert_no_new_processes(before, within=2.0)


async def test_the_depth_limit_travels_to_the_served_agent(
    rig: Any, tmp_path: Path, kit: Any
) -> None:
    preset = tmp_path / "served.toml"
    preset.write_text(SERVED)
    server = kit.start_dsh_a2a(tmp_path, preset)
    try:
        name = rig.register(server.url, depth_limit=True)
        # the served agent runs at depth 1 under max_depth 1: its own delegation (depth 2)
        # is refused there, and its model is told so
        run = await rig.start(name, "delegate please", max_depth=1)
        items, result = await progress_and_result(run)
    finally:
        assert server.stop() == 143
    assert result.stop_reason == "completed", result
    assert "subagent depth 2 exceeds max_depth 1" in result.output
    assert not [i for i in items if i.kind == "child_start"]


async def test_the_http_json_binding(rig: Any, tmp_path: Path, kit: Any) -> None:
    server = kit.start_dsh_a2a(tmp_path, keyed_preset_file(tmp_path / "served.toml"))
    try:
        name = rig.register(server.url, name="rest", transports=["http+json"])
        items, result = await progress_and_result(await rig.start(name, "over rest"), within=30)
        assert (result.stop_reason, result.output) == ("completed", "Done: over rest")
        assert "".join(i.text or "" for i in items if i.kind == "text") == "Done: over rest"
        assert result.usage.output_tokens == 3
    finally:
        assert server.stop() == 143


SELF_CHAIN = keyed_preset(
    default=calling_replies(
        "subagent_a2a", "recurse", description="go deeper", then="level done <{tool_results}>"
    ),
    plugins=plugin_rows(
        ("dsh-subagent-a2a", {"url": "$URL"}),
        (
            "dsh-tool-subagent",
            {"provider": "a2a", "tool_name": "subagent_a2a", "max_depth": "provider-managed"},
        ),
    ),
)


async def test_a_server_that_delegates_to_itself_stops_at_the_default_ceiling(
    rig: Any, tmp_path: Path, kit: Any
) -> None:
    """A `dsh a2a` whose own preset delegates back to itself, every row
    `provider-managed` (issue 21 item 1): the depth travels in the message metadata and
    the default ceiling stops the chain at depth 5; the deepest model sees the refusal."""
    import socket

    from dsh.subagent.kit import DEFAULT_MAX_DEPTH

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/"
    preset = tmp_path / "self.toml"
    preset.write_text(SELF_CHAIN.replace("$URL", url))
    server = kit.launch(
        [sys.executable, "-m", "dsh.a2a", "--preset", str(preset), "--port", str(port)],
        re.compile(r"dsh a2a: serving \"[^\"]*\" at (\S+) "),
        tmp_path / "self.stderr",
    )
    try:
        name = rig.register(server.url)
        with anyio.fail_after(90):
            result = await rig.run(name, "recurse")
    finally:
        assert server.stop() == 143
    assert result.stop_reason == "completed", result
    assert result.output.count("level done") == DEFAULT_MAX_DEPTH
    depth = DEFAULT_MAX_DEPTH + 1
    assert f"subagent depth {depth} exceeds max_depth {DEFAULT_MAX_DEPTH}" in result.output
