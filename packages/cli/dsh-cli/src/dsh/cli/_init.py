"""``dsh init``: write a commented ``dsh.toml`` that extends the standard preset, and
record it as trusted as written (workspace trust: an edit asks again)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

__all__ = ["TEMPLATE", "init_command"]

TEMPLATE = """\
# dsh.toml: the preset `dsh run` uses in this folder (docs/cli.md).
#
# It builds on the standard preset shipped with dsh (`dsh presets show standard`):
# [agent] keys given here override the standard ones, [[plugin]] rows are added after
# its rows (a row with the id of a standard row replaces that row's keys), and
# [permissions] entries are merged.
extends = "standard"

# [agent]
# persona = "You are a careful, precise assistant."
# max_steps = 50                   # model calls per turn
# sessions_dir = "sessions"        # keep every session as JSONL (relative to this file)

# The model. Without [agent.model], dsh run takes one from the environment, the first
# that is set: OPENAI_BASE_URL (+ OPENAI_API_KEY, OPENAI_MODEL) for any OpenAI-compatible
# server, DEEPSEEK_API_KEY for DeepSeek, OPENAI_API_KEY for OpenAI.
# [agent.model]
# adapter = "openai"               # OpenAI-compatible chat completions (dsh-llm-openai)
# model = "deepseek-chat"
# options = { base_url = "https://api.deepseek.com", api_key_env = "DEEPSEEK_API_KEY" }
#
# A local server (vLLM, Ollama, llama.cpp) needs no key:
# options = { base_url = "http://127.0.0.1:11434/v1", api_key_env = "" }

# Tool permissions: "allow", "ask" (prompt on the terminal; refused when nobody can
# answer) or "deny". Writing files and running commands ask by default; `dsh run --yes`
# allows everything.
# [permissions]
# default = "ask"
# [permissions.tools]
# read_file = "allow"
# shell = "ask"

# The sandbox every tool process runs in (bubblewrap; docs/security.md): the working
# directory writable, the rest read-only, .git/.dsh/this file protected, no network.
# [sandbox]
# mode = "workspace-write"         # "read-only", or "off" (no sandbox: only if you must)
# network = false
# writable_roots = []              # more absolute directories to make writable

# Switch off a standard row by its id:
# [[plugin]]
# id = "tool-subagent-fork"
# disabled = true

# Or add one: Codex as a subagent (docs/providers/codex.md).
# [[plugin]]
# id = "subagent-codex"
# disabled = false
# [[plugin]]
# id = "tool-subagent-codex"
# disabled = false
"""


def init_command(args: argparse.Namespace) -> int:
    """Write the template to ``args.path``; refuse to overwrite anything (exit 1)."""
    path = Path(args.path).expanduser()
    if path.is_dir():
        path = path / "dsh.toml"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        print(f"dsh init: {path} already exists; not overwriting it", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"dsh init: cannot write {path}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(TEMPLATE)
    from dsh.core.plugins import trust_preset

    try:  # you wrote it: trusted as written (an edit asks again, as for any file)
        trust_preset(path)
    except OSError as exc:
        print(f"dsh init: could not record trust for {path}: {exc}", file=sys.stderr)
    print(f'wrote {path} (extends the standard preset; edit it, then: dsh run "your task")')
    return 0
