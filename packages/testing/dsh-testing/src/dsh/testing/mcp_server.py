"""A small MCP server for tests, written with the official ``mcp`` SDK (extra ``mcp``).

Over stdio (the default)::

    python -m dsh.testing.mcp_server [--alias NAME]... [--fail-start] [--hang-start]

or over streamable HTTP on 127.0.0.1 (prints ``listening on <url>`` once it accepts
connections)::

    python -m dsh.testing.mcp_server --http 127.0.0.1:0

In-process, for a test that wants an HTTP server without a process::

    async with serve_http() as url:  # http://127.0.0.1:<port>/mcp
        ...

Tools:

``add(a, b)``
    ``a + b`` (text and structured content).
``echo(text)``
    ``text`` back.
``fail(message)``
    an error result (``isError``) carrying ``message``.
``sleep(seconds)``
    waits, then says ``slept <seconds>``.
``picture()``
    a text block and a 1x1 PNG image block.
``env(name)``
    the value of environment variable ``name`` in the server, or ``<unset>``.
``header(name)``
    the value of HTTP request header ``name`` (``<none>`` over stdio or when absent).
``pid()``
    the server's process id.
``spawn_sleeper(detach)``
    starts a ``sleep`` child that outlives this call (in the server's process group,
    or in a session of its own with ``detach``) and returns its pid: how tests see
    that a server's grandchildren are killed with it.

``--alias NAME`` adds a tool called ``NAME`` that echoes (tests of tool naming);
``--fail-start`` exits at once with status 3 and a message on stderr;
``--hang-start`` never answers (a server that cannot initialize).
"""

import sys

from dsh.testing._mcp_server import FAIL_START_MESSAGE, build_server, main, serve_http

__all__ = ["FAIL_START_MESSAGE", "build_server", "main", "serve_http"]

if __name__ == "__main__":
    sys.exit(main())
