"""A fake Gemini API server (``models/{model}:streamGenerateContent``), as the Gemini CLI
speaks it.

Routes, for each served model (``models``, default :data:`GEMINI_MODEL`), under
``/v1beta`` and ``/v1``:

* ``POST .../models/{model}:streamGenerateContent?alt=sse``: the reply streamed as
  bare ``data:`` SSE events, one ``GenerateContentResponse`` chunk each::

      data: {"candidates": [{"content": {"parts": [{"text": "Hel"}], "role": "model"},
             "index": 0}], "modelVersion": ..., "responseId": ...}
      ...
      data: {"candidates": [{"content": {"parts": [{"functionCall": {"name": "read_file",
             "args": {...}}}], "role": "model"}, "finishReason": "STOP", "index": 0}],
             "usageMetadata": {...}, ...}

  (without ``alt=sse`` the chunks come as one JSON array, as the real API sends them);
* ``POST .../models/{model}:generateContent``: the same reply as one JSON response;
* ``POST .../models/{model}:countTokens``: ``{"totalTokens": <words of the body>}``.

Errors use Google's shape: ``{"error": {"code": 400, "message": ..., "status":
"INVALID_ARGUMENT"}}``. A model the server does not serve gets 404.

Script items: :class:`GeminiReply` (text and/or :class:`GeminiCall` function calls,
with :class:`~dsh.testing.model_servers.StreamFaults`), a plain ``str`` (a text
reply), the generic faults (``HTTPError``, ``Hang``, ``Reset``), or a callable of the
request returning any of these.

Requests are answered by the first matching *rule* (:meth:`GeminiServer.when`, see
:mod:`~dsh.testing.model_servers.rules`), else by the script queue, else by
``default``. A rule matches text anywhere in the user contents' text parts (the Gemini
CLI sends a ``<session_context>`` content before the user's words; function responses
are not searched); its replies are picked by *tool step*, the rounds of function
responses after the latest prompt::

    srv = GeminiServer()
    srv.when("read the notes",
             GeminiReply(calls=[GeminiCall("read_file", {"file_path": "/w/notes.txt"})]),
             reply_with_function_response("Tool said: {output}"))

:func:`~dsh.testing.model_servers.gemini_cli_env` points the real Gemini CLI at it.
"""

from dsh.testing.model_servers._gemini import (
    GEMINI_MODEL,
    FunctionResponse,
    GeminiCall,
    GeminiReply,
    GeminiRule,
    GeminiServer,
    check_gemini_request,
    function_responses,
    gemini_error,
    reply_with_function_response,
    tool_step,
    user_text,
)

__all__ = [
    "GEMINI_MODEL",
    "FunctionResponse",
    "GeminiCall",
    "GeminiReply",
    "GeminiRule",
    "GeminiServer",
    "check_gemini_request",
    "function_responses",
    "gemini_error",
    "reply_with_function_response",
    "tool_step",
    "user_text",
]
