"""A fake OpenAI chat-completions server (``POST /v1/chat/completions``).

Speaks the wire format of OpenAI and the compatible servers (DeepSeek, vLLM,
Ollama, llama.cpp): streamed ``chat.completion.chunk`` events ending with
``data: [DONE]`` when the request says ``stream: true``, one
``chat.completion`` JSON object otherwise::

    with OpenAIChatServer(
        ChatReply(tool_calls=[ChatToolCall("read", {"path": "a.txt"})]),
        ChatReply(text="The file says hi."),
    ) as srv:
        ...  # point the client at srv.api_base ("http://127.0.0.1:<port>/v1")

Text streams as several ``content`` deltas; each tool call streams as the real
API does: a first delta with ``index``, ``id``, ``type`` and the function name
(arguments ``""``), then the arguments in pieces. With
``stream_options.include_usage`` every chunk has ``"usage": null`` and a last
chunk with empty ``choices`` carries the usage (``usage_with_finish=True``
puts it on the finish chunk instead, as DeepSeek does).

Script items: :class:`ChatReply`, a plain ``str`` (a text reply), the generic
faults (:class:`~dsh.testing.model_servers.HTTPError`, ``Hang``,
``Reset``), or a callable of the request returning any of these (see
:func:`echo_last_user_message`). With ``strict`` (default) the server rejects
requests the real API rejects (HTTP 400 with OpenAI's error shape): no model,
no messages, unknown roles, tool messages that answer no call, calls left
unanswered, non-string tool-call arguments, malformed tools, ``stream_options``
without ``stream``. With ``api_key`` set, a missing or wrong bearer token gets 401.
"""

from dsh.testing.model_servers._openai_chat import (
    ChatReply,
    ChatToolCall,
    OpenAIChatServer,
    check_request,
    echo_last_user_message,
    last_user_text,
    openai_auth_error,
    openai_error,
    split_text,
)

__all__ = [
    "ChatReply",
    "ChatToolCall",
    "OpenAIChatServer",
    "check_request",
    "echo_last_user_message",
    "last_user_text",
    "openai_auth_error",
    "openai_error",
    "split_text",
]
