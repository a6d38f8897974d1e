"""A fake OpenAI Responses API server (``POST /v1/responses``), as Codex speaks it.

With ``stream: true`` (what Codex always sends) a reply is streamed as named SSE
events, each ``data`` carrying its own ``type`` and a ``sequence_number``::

    response.created, response.in_progress,
    response.output_item.added, response.content_part.added,
    response.output_text.delta ..., response.output_text.done,
    response.content_part.done, response.output_item.done,      (per message)
    response.output_item.added, response.function_call_arguments.delta ...,
    response.function_call_arguments.done, response.output_item.done,  (per call)
    response.completed                                           (with usage)

Without ``stream`` the finished response object is sent as JSON.

Script items: :class:`ResponsesReply` (text and/or function calls, with
:class:`~dsh.testing.model_servers.StreamFaults` to stall, reset or cut the
stream), a plain ``str`` (a text reply), :class:`ResponseFailed` (a well-formed
``response.failed`` event), the generic faults (``HTTPError``, ``Hang``: no
headers ever, ``Reset``), or a callable of the request returning any of these.

Requests are answered by the first matching *rule* (:meth:`OpenAIResponsesServer.when`,
see :mod:`~dsh.testing.model_servers.rules`), else by the script queue, else by
``default``. A rule matches text in the latest user input (Codex sends two
developer messages first, then the user's)::

    srv = OpenAIResponsesServer()
    srv.when("say hello", "Hello!")
    srv.when("run echo",
             ResponsesReply(function_calls=[FunctionCall("exec_command", {"cmd": "echo hi"})]),
             reply_with_tool_output("Tool said: {output}"))
    srv.when("hang", Hang())
    srv.when("fail", HTTPError(500, "boom"))

A rule's replies are picked by *tool step*: the request that carries ``k`` tool
outputs after the latest user message gets ``replies[k]`` (the last one repeats),
so a rule scripts a whole tool round trip statelessly and can be reused by any
number of runs.
"""

from dsh.testing.model_servers._openai_responses import (
    TOOL_OUTPUT_TYPES,
    FunctionCall,
    OpenAIResponsesServer,
    ResponseFailed,
    ResponsesReply,
    ResponsesRule,
    check_responses_request,
    latest_user_input_text,
    reply_with_tool_output,
    tool_outputs,
    tool_step,
)

__all__ = [
    "TOOL_OUTPUT_TYPES",
    "FunctionCall",
    "OpenAIResponsesServer",
    "ResponseFailed",
    "ResponsesReply",
    "ResponsesRule",
    "check_responses_request",
    "latest_user_input_text",
    "reply_with_tool_output",
    "tool_outputs",
    "tool_step",
]
