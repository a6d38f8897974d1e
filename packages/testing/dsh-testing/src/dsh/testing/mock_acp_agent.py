"""A scripted ACP agent for fault tests of ACP clients (needs ``dsh-testing[acp]``).

Run it as a child process, the way a real agent runs::

    python -m dsh.testing.mock_acp_agent --mode MODE [--ignore-eof] [...]

It serves ACP on stdio with ``agent-client-protocol``. ``--mode`` picks how it
answers every ``session/prompt``:

``normal``
    streams ``You said: <prompt>`` word by word (one chunk per word, so chunk
    order matters), reports usage, ends with ``--stop-reason`` (``end_turn``).
``narrate``
    ``Let me look.``, a tool call, then ``The answer is 42.`` (a second message),
    a ``usage_update``, and usage in the answer.
``hang``
    streams ``working on it``, then waits until cancelled (answers ``cancelled``).
``ignore-cancel``
    streams ``working on it``, then never answers, whatever the client sends.
``crash``
    streams ``about to crash``, writes a line to stderr and exits with status 3.
``garbage``
    writes lines that are not JSON to stdout, then replies normally.
``permission``
    reports a tool call, asks permission (allow once / allow always / reject
    once / reject always), then says ``permission: <kind chosen>`` (or
    ``permission: cancelled``) and ends with ``--stop-reason``.
``ask-after-cancel``
    streams ``working on it``, waits for ``session/cancel``, then asks
    permission anyway and says ``permission: <answer>``, ending ``cancelled``.
``huge``
    streams ``--huge-mb`` MiB of text in ``--chunk-kb`` KiB chunks (default 256;
    chunk *i* repeats the letter ``"abcdefghijklmnopqrstuvwxyz"[i % 26]``).
``slow-eof``
    replies normally but ignores stdin EOF and SIGTERM (like ``--ignore-eof``).
``error``
    answers the prompt with a JSON-RPC error.
``exit-on-start``
    writes a line to stderr and exits with status 7 before serving.
``bad-init``
    answers ``initialize`` with protocol version 99.
``slow-start``
    sleeps ``--delay`` seconds before serving.
``inspect``
    replies with a JSON object: the session's cwd, the process's cwd and its
    environment (to check what a client passed).
``bad-error``
    answers the prompt with a JSON-RPC error that is not an object (``"boom"``).
``wrong-id``
    answers the prompt with a response whose id the client never sent.
``partial-line``
    writes half a response line (no newline) and then stays silent.
``notice``
    says ``Working.``, then reports an informational notice: as a ``notice``
    session update when the client declared ``session.notices``, else (as
    claude-agent-acp does) as an ``agent_message_chunk`` without ``messageId``
    marked ``_meta.claudeCode.kind = "informational"``; then answers ``The answer.``
``by-prompt``
    the prompt's first word is the mode (``hang``, ``crash``, ...); the rest is
    the text.

Session modes: ``--modes default,auto`` offers those mode ids in ``session/new``
(``currentModeId``: ``--initial-mode``, else the last one) and accepts
``session/set_mode`` to any of them (``--refuse-set-mode``: answers it with an
error); without ``--modes`` the agent has no modes. In mode ``auto`` or
``bypassPermissions`` the ``permission`` mode approves its own tool call without
asking and says ``permission: self-approved``, as claude-agent-acp does.

``--ignore-eof`` keeps the process alive after stdin closes, ignoring SIGTERM:
only SIGKILL ends it. ``--escapee`` starts a process in a session of its own (as
agent products do for tool commands), which outlives the agent unless its
client finds it.

Tests that need an ACP agent of their own subclass :class:`AcpTestAgent` (as
:class:`MockAgent` does) and script what they test, usually ``session/prompt``.
"""

from dsh.testing._acp_test_agent import AcpTestAgent, AcpTestSession, prompt_text
from dsh.testing._mock_acp_agent import MODES, MockAgent, main

__all__ = ["MODES", "AcpTestAgent", "AcpTestSession", "MockAgent", "main", "prompt_text"]

if __name__ == "__main__":
    main()
