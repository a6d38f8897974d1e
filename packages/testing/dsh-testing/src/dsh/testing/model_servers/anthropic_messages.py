"""A fake Anthropic Messages API server (``POST /v1/messages``), as Claude Code speaks it.

With ``stream: true`` (what Claude Code always sends, as ``/v1/messages?beta=true``;
any query string is accepted) a reply is streamed as named SSE events::

    message_start, ping,
    content_block_start, content_block_delta (text_delta | input_json_delta) ...,
    content_block_stop,                                        (per block)
    message_delta (stop_reason, usage), message_stop

Without ``stream`` the finished message is sent as JSON. Errors use Anthropic's
shape: ``{"type": "error", "error": {"type": "api_error", "message": ...}}``.

Script items: :class:`MessagesReply` (text and/or tool uses, with
:class:`~dsh.testing.model_servers.StreamFaults` to stall, reset or cut the
stream), a plain ``str`` (a text reply), the generic faults (``HTTPError``,
``Hang``: no headers ever, ``Reset``), or a callable of the request returning any
of these.

Requests are answered by the first matching *rule* (:meth:`AnthropicMessagesServer.when`,
see :mod:`~dsh.testing.model_servers.rules`), else by the script queue, else by
``default``. A rule matches text anywhere in the user messages' text blocks
(Claude Code puts a long ``<system-reminder>`` block before the user's words;
tool results are not searched)::

    srv = AnthropicMessagesServer()
    srv.when("say hello", "Hello!")
    srv.when("run pwd",
             MessagesReply(tool_uses=[ToolUse("Bash", {"command": "pwd"})]),
             reply_with_tool_result("Tool said: {output}"))
    srv.when("stall", MessagesReply(text="partial answer", faults=StreamFaults(hang_after=4)))
    srv.when("fail", HTTPError(500, "boom"))

A rule's replies are picked by *tool step*: the request that carries ``k`` rounds
of tool results after the latest prompt gets ``replies[k]`` (the last one
repeats), so a rule scripts a whole tool round trip statelessly and serves any
number of runs.
"""

from dsh.testing.model_servers._anthropic_messages import (
    AnthropicMessagesServer,
    MessagesReply,
    MessagesRule,
    ToolUse,
    anthropic_error,
    check_messages_request,
    reply_with_tool_result,
    tool_results,
    tool_step,
    user_text,
)

__all__ = [
    "AnthropicMessagesServer",
    "MessagesReply",
    "MessagesRule",
    "ToolUse",
    "anthropic_error",
    "check_messages_request",
    "reply_with_tool_result",
    "tool_results",
    "tool_step",
    "user_text",
]
