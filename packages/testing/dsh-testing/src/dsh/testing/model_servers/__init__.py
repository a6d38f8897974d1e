"""Fake model servers on 127.0.0.1 for real HTTP wire tests, without any network.

:class:`FakeServer` is the shared base (stdlib asyncio HTTP/1.1 in a thread of
its own, a request log, a script queue, SSE helpers and faults);
:class:`OpenAIChatServer` speaks OpenAI chat completions on top of it,
:class:`OpenAIResponsesServer` the OpenAI Responses API (what Codex speaks),
:class:`AnthropicMessagesServer` the Messages API (Claude Code), :class:`GeminiServer`
the Gemini API (the Gemini CLI).
"""

from dsh.testing.model_servers._anthropic_messages import (
    AnthropicMessagesServer,
    MessagesReply,
    ToolUse,
)
from dsh.testing.model_servers._gemini import (
    GEMINI_MODEL,
    GeminiCall,
    GeminiReply,
    GeminiServer,
    reply_with_function_response,
)
from dsh.testing.model_servers._http import Exchange, Handler, RecordedRequest
from dsh.testing.model_servers._openai_chat import (
    ChatReply,
    ChatToolCall,
    OpenAIChatServer,
    check_request,
    echo_last_user_message,
    last_user_text,
    openai_error,
    split_text,
)
from dsh.testing.model_servers._openai_responses import (
    FunctionCall,
    OpenAIResponsesServer,
    ResponseFailed,
    ResponsesReply,
    reply_with_tool_output,
)
from dsh.testing.model_servers._product_env import (
    claude_code_env,
    codex_offline_env,
    gemini_cli_env,
)
from dsh.testing.model_servers._script import NO_FAULTS, Hang, HTTPError, Reset, StreamFaults
from dsh.testing.model_servers._server import FakeServer
from dsh.testing.model_servers._sse import SSE_DONE, SSEEvent, parse_sse

__all__ = [
    "GEMINI_MODEL",
    "NO_FAULTS",
    "SSE_DONE",
    "AnthropicMessagesServer",
    "ChatReply",
    "ChatToolCall",
    "Exchange",
    "FakeServer",
    "FunctionCall",
    "GeminiCall",
    "GeminiReply",
    "GeminiServer",
    "HTTPError",
    "Handler",
    "Hang",
    "MessagesReply",
    "OpenAIChatServer",
    "OpenAIResponsesServer",
    "RecordedRequest",
    "Reset",
    "ResponseFailed",
    "ResponsesReply",
    "SSEEvent",
    "StreamFaults",
    "ToolUse",
    "check_request",
    "claude_code_env",
    "codex_offline_env",
    "echo_last_user_message",
    "gemini_cli_env",
    "last_user_text",
    "openai_error",
    "parse_sse",
    "reply_with_function_response",
    "reply_with_tool_output",
    "split_text",
]
