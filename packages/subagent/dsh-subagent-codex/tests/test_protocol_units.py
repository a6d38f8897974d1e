"""Message classification, the server-request policy, turn folding and config, with the
real message shapes codex 0.171.0 sends (from its generated JSON schema and transcripts)."""

from __future__ import annotations

from typing import Any

import pytest

from dsh.subagent import SubagentProgress, SubagentUsage
from dsh.subagent_codex import CodexConfig
from dsh.subagent_codex._config import toml_value
from dsh.subagent_codex._policy import KNOWN_METHODS, decide
from dsh.subagent_codex._rpc import Notification, ProtocolError, Response, ServerRequest, classify
from dsh.subagent_codex._turn import TurnTracker

THREAD = "01a23681-b378-7c40-8a1e-2f7d0c5e9b11"
TURN = "01a23681-b392-7f61-9d0e-6a1c3b2e4d55"

# -- classification ------------------------------------------------------------------


def test_messages_are_told_apart_by_keys_not_ids() -> None:
    response = classify(
        {"id": 0, "result": {"userAgent": "dsh/0.171.0", "codexHome": "/h", "platformOs": "linux"}}
    )
    assert response == Response(
        0, {"userAgent": "dsh/0.171.0", "codexHome": "/h", "platformOs": "linux"}
    )
    error = classify({"id": 3, "error": {"code": -32600, "message": "no active turn to interrupt"}})
    assert isinstance(error, Response)
    assert error.error == {"code": -32600, "message": "no active turn to interrupt"}
    # codex numbers its own requests from 0 too: the `method` key decides
    request = classify(
        {"method": "item/fileChange/requestApproval", "id": 0, "params": {"threadId": THREAD}}
    )
    assert request == ServerRequest(0, "item/fileChange/requestApproval", {"threadId": THREAD})
    note = classify({"method": "turn/started", "params": {"threadId": THREAD}, "emittedAtMs": 1})
    assert note == Notification("turn/started", {"threadId": THREAD})
    assert classify({"method": "initialized"}) == Notification("initialized", {})


@pytest.mark.parametrize("bad", [[1, 2], "text", {"id": 1}, {"params": {}}, {"method": 5}])
def test_non_messages_are_protocol_errors(bad: Any) -> None:
    with pytest.raises(ProtocolError):
        classify(bad)


# -- the server-request policy -------------------------------------------------------

COMMAND_APPROVAL = {
    "kind": "command",
    "threadId": THREAD,
    "turnId": TURN,
    "itemId": "call_27",
    "startedAtMs": 1796210816915,
    "environmentId": "local",
    "command": "/bin/bash -lc 'touch made_by_tool.txt && echo made'",
    "cwd": "/work/ws",
    "commandActions": [{"type": "unknown", "command": "touch made_by_tool.txt && echo made"}],
    "proposedExecpolicyAmendment": ["touch", "made_by_tool.txt"],
    "availableDecisions": [
        "accept",
        {"acceptWithExecpolicyAmendment": {"execpolicy_amendment": ["touch", "made_by_tool.txt"]}},
        "cancel",
    ],
}
FILE_APPROVAL = {
    "threadId": THREAD,
    "turnId": TURN,
    "itemId": "call_8",
    "startedAtMs": 1796210816915,
    "reason": None,
    "grantRoot": None,
}
PERMISSIONS = {
    "threadId": THREAD,
    "turnId": TURN,
    "itemId": "call_9",
    "cwd": "/work/ws",
    "startedAtMs": 1796210816915,
    "reason": "needs the network",
    "permissions": {"network": {"enabled": True}, "fileSystem": None},
}
LEGACY_EXEC = {
    "conversationId": THREAD,
    "callId": "call_1",
    "approvalId": "a1",
    "command": ["touch", "x"],
    "cwd": "/work/ws",
    "reason": None,
    "parsedCmd": [],
}
USER_INPUT = {
    "threadId": THREAD,
    "turnId": TURN,
    "itemId": "call_4",
    "questions": [
        {
            "id": "q1",
            "header": "Pick",
            "question": "Which file?",
            "options": [],
            "isOther": True,
            "isSecret": False,
        }
    ],
    "isBlocking": True,
}
ELICITATION = {"threadId": THREAD, "turnId": TURN, "serverName": "docs", "mode": "form"}
DYNAMIC_TOOL = {
    "threadId": THREAD,
    "turnId": TURN,
    "callId": "call_5",
    "namespace": None,
    "tool": "lookup",
    "arguments": {"q": "x"},
}


@pytest.mark.parametrize(
    ("method", "params", "declined", "accepted"),
    [
        (
            "item/commandExecution/requestApproval",
            COMMAND_APPROVAL,
            {"decision": "decline"},
            {"decision": "accept"},
        ),
        (
            "item/fileChange/requestApproval",
            FILE_APPROVAL,
            {"decision": "decline"},
            {"decision": "accept"},
        ),
        (
            "item/permissions/requestApproval",
            PERMISSIONS,
            {"permissions": {}, "scope": "turn"},
            {"permissions": {"network": {"enabled": True}, "fileSystem": None}, "scope": "turn"},
        ),
        (
            "execCommandApproval",
            LEGACY_EXEC,
            {
                "decision": {
                    "denied": {"rejection": "declined: this unattended subagent cannot ask a user"}
                }
            },
            {"decision": "approved"},
        ),
        (
            "applyPatchApproval",
            {
                "conversationId": THREAD,
                "callId": "c",
                "fileChanges": {},
                "reason": None,
                "grantRoot": None,
            },
            {
                "decision": {
                    "denied": {"rejection": "declined: this unattended subagent cannot ask a user"}
                }
            },
            {"decision": "approved"},
        ),
    ],
)
def test_approvals_are_declined_unless_the_mode_approves(
    method: str, params: dict[str, Any], declined: Any, accepted: Any
) -> None:
    no = decide(method, params, approve=False)
    assert no.answer.result == declined
    assert no.answer.error is None
    assert no.approved is False
    assert no.fatal is None
    yes = decide(method, params, approve=True)
    assert yes.answer.result == accepted
    assert yes.approved is True
    assert yes.fatal is None


@pytest.mark.parametrize(
    ("method", "params", "answer"),
    [
        ("item/tool/requestUserInput", USER_INPUT, {"answers": {}}),
        (
            "mcpServer/elicitation/request",
            ELICITATION,
            {"action": "decline", "content": None, "_meta": None},
        ),
        (
            "item/tool/call",
            DYNAMIC_TOOL,
            {
                "contentItems": [
                    {
                        "type": "inputText",
                        "text": "dsh registers no dynamic tools; 'lookup' is not available",
                    }
                ],
                "success": False,
            },
        ),
    ],
)
@pytest.mark.parametrize("approve", [False, True])
def test_questions_elicitations_and_dynamic_tools_get_no(
    method: str, params: dict[str, Any], answer: Any, approve: bool
) -> None:
    decision = decide(method, params, approve=approve)
    assert decision.answer.result == answer
    assert decision.approved is None
    assert decision.fatal is None


@pytest.mark.parametrize(
    ("method", "params"),
    [
        (
            "account/chatgptAuthTokens/refresh",
            {"reason": "unauthorized", "previousAccountId": None},
        ),
        ("attestation/generate", {}),
        ("item/somethingNew/request", {"threadId": THREAD}),
    ],
)
def test_unknown_requests_get_an_error_and_fail_the_run(method: str, params: Any) -> None:
    for approve in (False, True):
        decision = decide(method, params, approve=approve)
        assert decision.answer.result is None
        assert decision.answer.error is not None
        code, message = decision.answer.error
        assert code == -32601
        assert method in message
        assert decision.fatal is not None
        assert repr(method) in decision.fatal


def test_every_server_request_of_the_schema_is_classified() -> None:
    schema_methods = {
        "item/commandExecution/requestApproval",
        "item/fileChange/requestApproval",
        "item/tool/requestUserInput",
        "mcpServer/elicitation/request",
        "item/permissions/requestApproval",
        "item/tool/call",
        "account/chatgptAuthTokens/refresh",
        "attestation/generate",
        "applyPatchApproval",
        "execCommandApproval",
    }
    # the two with no safe automatic answer are left unknown on purpose
    assert schema_methods - KNOWN_METHODS == {
        "account/chatgptAuthTokens/refresh",
        "attestation/generate",
    }
    assert schema_methods >= KNOWN_METHODS


# -- turn folding --------------------------------------------------------------------


def note(method: str, **params: Any) -> Notification:
    return Notification(method, {"threadId": THREAD, **params})


def agent_item(item_id: str, text: str) -> dict[str, Any]:
    return {
        "type": "agentMessage",
        "moderation": None,
        "id": item_id,
        "text": text,
        "phase": None,
        "memoryCitation": None,
    }


def test_a_completed_turn_answers_with_its_last_non_empty_agent_message() -> None:
    tracker = TurnTracker(THREAD)
    assert not tracker.feed(note("turn/started", turn={"id": TURN, "status": "inProgress"}))
    assert tracker.turn_id == TURN
    for delta in ("Looking", " around"):
        tracker.feed(note("item/agentMessage/delta", turnId=TURN, itemId="msg_1", delta=delta))
    tracker.feed(note("item/completed", turnId=TURN, item=agent_item("msg_1", "Looking around")))
    tracker.feed(note("item/completed", turnId=TURN, item=agent_item("msg_2", "The answer is 42.")))
    tracker.feed(note("item/completed", turnId=TURN, item=agent_item("msg_3", "  ")))
    usage = {
        "total": {
            "totalTokens": 110,
            "inputTokens": 100,
            "cachedInputTokens": 7,
            "cacheWriteInputTokens": 0,
            "outputTokens": 10,
            "reasoningOutputTokens": 2,
        },
        "last": {},
        "modelContextWindow": 258400,
    }
    tracker.feed(note("thread/tokenUsage/updated", turnId=TURN, tokenUsage=usage))
    # another thread's notifications are ignored
    other = Notification(
        "item/completed", {"threadId": "other", "item": agent_item("msg_9", "not ours")}
    )
    assert not tracker.feed(other)
    done = tracker.feed(
        note(
            "turn/completed",
            turn={
                "id": TURN,
                "items": [agent_item("msg_2", "The answer is 42.")],
                "itemsView": "summary",
                "status": "completed",
                "error": None,
            },
        )
    )
    assert done
    assert tracker.status == "completed"
    assert tracker.answer() == "The answer is 42."
    assert tracker.usage == SubagentUsage(
        input_tokens=100, output_tokens=10, cached_input_tokens=7, reasoning_tokens=2
    )
    assert tracker.usage.incomplete is False


def test_an_interrupted_turn_keeps_the_streamed_partial_text() -> None:
    tracker = TurnTracker(THREAD, turn_id=TURN)
    tracker.feed(note("item/agentMessage/delta", turnId=TURN, itemId="msg_2", delta="Partial an"))
    tracker.feed(note("item/agentMessage/delta", turnId=TURN, itemId="msg_2", delta="swer"))
    tracker.feed(
        note(
            "turn/completed",
            turn={"id": TURN, "items": [], "status": "interrupted", "error": None},
        )
    )
    assert tracker.status == "interrupted"
    assert tracker.answer() == ""
    assert tracker.partial() == "Partial answer"


def test_a_failed_turn_explains_itself() -> None:
    tracker = TurnTracker(THREAD, turn_id=TURN)
    error = {
        "message": "We’re currently experiencing high demand, which may cause temporary errors.",
        "codexErrorInfo": "internalServerError",
        "additionalDetails": None,
    }
    tracker.feed(note("error", turnId=TURN, error=error, willRetry=False))
    tracker.feed(
        note("turn/completed", turn={"id": TURN, "items": [], "status": "failed", "error": error})
    )
    assert tracker.status == "failed"
    assert tracker.error_text() == (
        "We’re currently experiencing high demand, which may cause temporary errors."
        " [internalServerError]"
    )
    retrying = TurnTracker(THREAD)
    retrying.feed(
        note(
            "error",
            error={
                "message": "Reconnecting... 1/5",
                "codexErrorInfo": {"responseStreamDisconnected": {"httpStatusCode": None}},
            },
            willRetry=True,
        )
    )
    assert retrying.error_text() == (
        "Reconnecting... 1/5 [responseStreamDisconnected: {'httpStatusCode': None}]"
        " (codex will retry)"
    )


# -- progress ------------------------------------------------------------------------


def command_item(status: str, exit_code: int | None, output: str | None) -> dict[str, Any]:
    return {
        "type": "commandExecution",
        "id": "call_7",
        "command": "/bin/bash -lc 'make test'",
        "cwd": "/work/ws",
        "processId": "4242",
        "source": "unifiedExecStartup",
        "status": status,
        "commandActions": [{"type": "unknown", "command": "make test"}],
        "aggregatedOutput": output,
        "exitCode": exit_code,
        "durationMs": None,
    }


def progress_of(tracker: TurnTracker, method: str, **params: Any) -> SubagentProgress | None:
    message = note(method, **params)
    tracker.feed(message)
    return tracker.progress(message)


def test_deltas_map_to_text_and_thinking() -> None:
    tracker = TurnTracker(THREAD, turn_id=TURN)
    where = {"turnId": TURN, "itemId": "x"}
    assert progress_of(tracker, "item/agentMessage/delta", **where, delta="Hel") == (
        SubagentProgress("text", text="Hel")
    )
    assert progress_of(
        tracker, "item/reasoning/summaryTextDelta", **where, delta="Plan", summaryIndex=0
    ) == SubagentProgress("thinking", text="Plan")
    assert progress_of(
        tracker, "item/reasoning/textDelta", **where, delta="raw", contentIndex=0
    ) == SubagentProgress("thinking", text="raw")
    assert progress_of(tracker, "item/agentMessage/delta", **where, delta="") is None
    other = Notification("item/agentMessage/delta", {"threadId": "other", "delta": "x"})
    assert tracker.progress(other) is None
    assert progress_of(tracker, "turn/started", turn={"id": TURN}) is None


def test_commands_map_to_tool_call_and_tool_update() -> None:
    tracker = TurnTracker(THREAD, turn_id=TURN)
    started = progress_of(tracker, "item/started", item=command_item("inProgress", None, None))
    assert started == SubagentProgress(
        "tool_call",
        tool_call_id="call_7",
        name="exec_command",
        title="/bin/bash -lc 'make test'",
        arguments={"command": "/bin/bash -lc 'make test'"},
    )
    done = progress_of(tracker, "item/completed", item=command_item("completed", 0, "ok\n"))
    assert done == SubagentProgress(
        "tool_update", tool_call_id="call_7", name="exec_command", status="completed", text="ok\n"
    )
    long = "x" * 5000
    failed = progress_of(tracker, "item/completed", item=command_item("completed", 2, long))
    assert failed is not None
    assert failed.status == "failed"  # by its exit code
    assert failed.text == "x" * 399 + "…"
    declined = progress_of(tracker, "item/completed", item=command_item("declined", None, None))
    assert declined is not None
    assert (declined.status, declined.text) == ("failed", None)
    # other items are not tools
    assert progress_of(tracker, "item/started", item=agent_item("msg_1", "")) is None


def test_file_changes_and_mcp_calls_map_to_tools() -> None:
    tracker = TurnTracker(THREAD, turn_id=TURN)
    changes = [
        {"path": "/work/ws/a.py", "kind": {"type": "add"}, "diff": "+x"},
        {"path": "/work/ws/b.py", "kind": {"type": "update"}, "diff": "-y"},
    ]
    item = {"type": "fileChange", "id": "call_8", "changes": changes, "status": "inProgress"}
    call = progress_of(tracker, "item/started", item=item)
    assert call == SubagentProgress(
        "tool_call",
        tool_call_id="call_8",
        name="apply_patch",
        title="/work/ws/a.py, /work/ws/b.py",
        arguments={"paths": ["/work/ws/a.py", "/work/ws/b.py"]},
    )
    update = progress_of(tracker, "item/completed", item={**item, "status": "failed"})
    assert update is not None
    assert (update.tool_call_id, update.status) == ("call_8", "failed")
    mcp = {
        "type": "mcpToolCall",
        "id": "call_9",
        "server": "docs",
        "tool": "search",
        "arguments": {"q": "x"},
        "status": "failed",
        "error": {"message": "server went away"},
        "result": None,
    }
    call = progress_of(tracker, "item/started", item={**mcp, "status": "inProgress", "error": None})
    assert call is not None
    assert (call.name, call.title, call.arguments) == ("search", "docs/search", {"q": "x"})
    update = progress_of(tracker, "item/completed", item=mcp)
    assert update is not None
    assert (update.status, update.text) == ("failed", "server went away")


def test_token_usage_and_retries_map_to_usage_and_notices() -> None:
    tracker = TurnTracker(THREAD, turn_id=TURN)
    total = {
        "totalTokens": 15,
        "inputTokens": 10,
        "cachedInputTokens": 4,
        "outputTokens": 5,
        "reasoningOutputTokens": 1,
    }
    usage = progress_of(
        tracker, "thread/tokenUsage/updated", tokenUsage={"total": total, "last": total}
    )
    expected = SubagentUsage(10, 5, cached_input_tokens=4, reasoning_tokens=1)
    assert usage == SubagentProgress("usage", usage=expected)
    retry = progress_of(tracker, "error", error={"message": "Reconnecting... 1/5"}, willRetry=True)
    assert retry == SubagentProgress("notice", text="Reconnecting... 1/5 (codex will retry)")
    assert progress_of(tracker, "error", error={"message": "final"}, willRetry=False) is None
    assert progress_of(tracker, "warning", message="disk almost full") == SubagentProgress(
        "notice", text="disk almost full"
    )


def test_no_token_usage_reported_is_unknown() -> None:
    tracker = TurnTracker(THREAD, turn_id=TURN)
    assert tracker.usage is None
    assert progress_of(tracker, "thread/tokenUsage/updated", tokenUsage=None) is None
    assert tracker.usage is None


# -- config --------------------------------------------------------------------------


def test_argv_and_overrides() -> None:
    config = CodexConfig(
        command="/opt/codex",
        config_overrides={
            "model_providers.openai.request_max_retries": 0,
            "model": "gpt-5.5",
            "features": {"plugins": False},
            "sandbox_workspace_write.writable_roots": ["/tmp/a b"],
        },
    )
    assert config.argv == [
        "/opt/codex",
        "app-server",
        "--strict-config",
        "-c",
        "model_providers.openai.request_max_retries=0",
        "-c",
        'model="gpt-5.5"',
        "-c",
        'features={"plugins" = false}',
        "-c",
        'sandbox_workspace_write.writable_roots=["/tmp/a b"]',
    ]
    assert CodexConfig(strict_config=False).argv == ["codex", "app-server"]
    strict = ["--strict-config"]
    wrapped = CodexConfig(command="npx", args=["--yes", "@openai/codex@0.171.0"])
    assert wrapped.argv == ["npx", "--yes", "@openai/codex@0.171.0", "app-server", *strict]


def test_timeouts_come_from_the_kit() -> None:
    config = CodexConfig()
    assert config.turn_timeout == 900  # a model server that never answers cannot hang a run
    assert config.start_timeout == 60
    assert config.cancel_grace == 0.5  # codex ends an interrupted turn in 3-105 ms
    assert CodexConfig(turn_timeout=None).turn_timeout is None
    assert CodexConfig(turn_timeout=0).turn_timeout is None  # TOML has no null: 0 = no limit


def test_toml_values() -> None:
    assert toml_value('quote " and\nnewline é') == '"quote \\" and\\nnewline é"'
    assert toml_value(1.5) == "1.5"
    assert toml_value(True) == "true"
    with pytest.raises(ValueError, match="TOML cannot hold"):
        toml_value(None)
    with pytest.raises(ValueError, match="TOML cannot hold"):
        toml_value(float("nan"))


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ({"codex_home": "relative/home"}, "must be an absolute path"),
        ({"cwd": "ws"}, "must be an absolute path"),
        ({"command": ["codex", "-v"]}, "command is one executable; put further arguments in args"),
        ({"command": []}, "command is one executable"),
        ({"command": "  "}, "must name the codex executable"),
        ({"command": ""}, "at least 1 character"),
        ({"startup_timeout": 30}, "startup_timeout was renamed start_timeout"),
        ({"permission_mode": "yolo"}, "permission_mode"),
        ({"turn_timeout": -1}, "greater than 0"),
        ({"config_overrides": {"a b": 1}}, "not a dotted TOML key"),
        ({"config_overrides": {"x": None}}, "TOML cannot hold"),
        ({"unknown": 1}, "Extra inputs are not permitted"),
    ],
)
def test_bad_config_is_refused_naming_the_value(raw: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        CodexConfig(**raw)


def test_permission_modes() -> None:
    modes = {
        mode: (s.sandbox, s.approval_policy, s.approve)
        for mode, s in (
            (m, CodexConfig(permission_mode=m).permissions)
            for m in ("read-only", "workspace-write", "auto-approve", "full-access")
        )
    }
    assert modes == {
        "read-only": ("read-only", "on-request", False),
        "workspace-write": ("workspace-write", "on-request", False),
        "auto-approve": ("workspace-write", "on-request", True),
        "full-access": ("danger-full-access", "never", True),
    }
    assert CodexConfig().permission_mode == "read-only"
