"""Tapes: record a whole delegation tree's model traffic, replay it offline.

:class:`TapeProxy` is a recording proxy for model HTTP APIs — one mechanism for every
API (OpenAI chat completions, OpenAI Responses, Anthropic Messages; streaming SSE
included) and every client (dsh's own agents, ``dsh acp`` children in other
processes, agent products): the client is pointed at ``proxy.base_url(label)`` where
the API's base URL went, and the rest of the path is forwarded as is::

    with TapeProxy("tapes/run1", "record", {"openai": "https://api.openai.com/v1"}) as proxy:
        os.environ["OPENAI_BASE_URL"] = proxy.base_url("openai")
        ...  # run the tree: every model call goes through the proxy and is recorded

    with TapeProxy("tapes/run1", "replay") as proxy:  # no upstream, no key
        ...
        if proxy.divergence is not None:
            print(proxy.divergence)  # where, and a short diff

**Routes.** Every path starts with the proxy's random token (:attr:`TapeProxy.proxy_url`;
without it: 404, so no other local process or web page can use the proxy). Besides
``<proxy_url>/u/<label>/...`` (:meth:`TapeProxy.base_url`), the route
``<proxy_url>/x/<label>/<base64url(upstream base URL)>/...`` forwards to the upstream
it carries when recording (ignored when replaying): with ``DSH_TAPE_PROXY`` set to
``proxy_url`` (:meth:`TapeProxy.env`), :func:`dsh.subagent.kit.taped_url` builds it in
any process of a tree — the codex and claude-code providers use it.

**The tape format, version 2** (version 1, model exchanges only, is still read).
``<directory>/tape.jsonl``, UTF-8 JSON Lines, opened for appending; each line is
written with one ``write`` and never rewritten. The first line of each recording is a
header::

    {"tape": 2, "created": "2026-12-04T09:00:00+00:00", ...meta (e.g. "model")}

then one line per exchange, written when its response has been passed on whole::

    {"v": 2, "seq": 1, "label": "openai", "method": "POST", "path": "/chat/completions",
     "request": {...the JSON body, or its text, or null...},
     "status": 200, "content_type": "text/event-stream",
     "body": "data: {...}\\n\\ndata: [DONE]\\n\\n",
     "conversation": "3f2a9c1b7d4e", "call": 0}

and one line per tool call of a dsh agent of the tree (posted to the route
``<proxy_url>/t/tools`` by :class:`dsh.core.tapes.ToolTape`), once its result is in::

    {"v": 2, "seq": 2, "kind": "tool", "label": "tool", "conversation": "...", "call": 0,
     "name": "read_file", "arguments": {...}, "result": {"content": [...], "is_error": false}}

``seq`` counts from 1 per recording; ``path`` is relative to the label's base URL.
No header is ever written (no ``Authorization``, no ``x-api-key``); key-like query
parameters and JSON members (``api_key``, ``authorization``, ...) and key-looking
texts (``sk-...``, ``Bearer ...``) are replaced by ``[REDACTED]``. A reader ignores
members it does not know; a new incompatible format gets a new version number.

**Conversation and call.** A model API carries no agent identity, so the proxy
derives one: ``conversation`` is a short hash of the system text (``system``,
``instructions`` or the first system/developer message) and the first user message;
``call`` is the number of assistant turns already in the request (0 for an agent's
first call). Together they stand in for the agent's place in the tree.

**Modes.** ``record`` forwards and records; ``replay`` answers model calls from the
tape, checks tool calls against it (``replay_tools=True``: answers them too);
``resume`` answers what the tape holds and forwards and records the rest (after a
crash: only the step in flight repeats).

**In the proxy's process.** :func:`attach` puts a context's own agents on the tape
without the proxy hop: their tool calls by a direct call
(:meth:`TapeProxy.tool_tape`), their HTTP model's calls through
:meth:`TapeProxy.transport` (a :class:`TapeTransport`, for an adapter that takes one:
:class:`TransportSeam`). Both share the proxy's matching, redaction and writer (one
lock), so the lines are those the proxy would write.

**Replay.** A request is matched by label, method, path and its canonical body (JSON
with keys sorted, :data:`VOLATILE_FIELDS` left out); identical requests are answered
in recorded order, with the recorded status, content type and body (an SSE body as
recorded, so streaming clients parse it as usual). A request the tape does not hold
is answered HTTP 409 with an error body naming the divergence; the first is kept as
:attr:`TapeProxy.divergence` (:class:`Divergence`: label, path, conversation, call
and a unified diff of at most 40 lines from the closest recorded request not yet
answered).

**Normalisation.** What a client legitimately changes between two runs of one test
beyond :data:`VOLATILE_FIELDS` — a temporary folder, today's date — is rewritten the
same way when recording and when replaying (``TapeProxy(..., normalise=``
:class:`Normalisation` ``(...))``): placeholders for this run's texts (put back in
the answers), regular expressions, and extra volatile fields.
"""

from dsh.tape._attach import ClosableAdapter, TransportSeam, attach, taped_model
from dsh.tape._format import (
    FORMAT_VERSION,
    READ_VERSIONS,
    TAPE_FILE,
    VOLATILE_FIELDS,
    Divergence,
    Tape,
    TapeError,
    read_tape,
)
from dsh.tape._normalise import ISO_DATE, PRODUCT_PATTERNS, Normalisation
from dsh.tape._proxy import TapeProxy
from dsh.tape._transport import TapeTransport

__all__ = [
    "FORMAT_VERSION",
    "ISO_DATE",
    "PRODUCT_PATTERNS",
    "READ_VERSIONS",
    "TAPE_FILE",
    "VOLATILE_FIELDS",
    "ClosableAdapter",
    "Divergence",
    "Normalisation",
    "Tape",
    "TapeError",
    "TapeProxy",
    "TapeTransport",
    "TransportSeam",
    "attach",
    "read_tape",
    "taped_model",
]
