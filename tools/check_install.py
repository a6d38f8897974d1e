"""The README's install command, checked as a user would run it (CI runs this).

Runs ``tools/install.sh`` with ``HOME`` set to a throwaway folder (and the XDG and
``UV_TOOL_*`` variables unset, so uv's defaults apply there), then, with a ``PATH`` that
holds only that home's ``.local/bin`` and the system's folders (not this workspace's
environment):

* ``dsh --help`` lists the built-in commands;
* ``dsh run --yes`` with only ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` set, from a
  folder with no ``dsh.toml``, drives the fake OpenAI-compatible server of
  ``dsh.testing``: the model reads a file of that folder with the file tool and runs a
  command in the sandboxed shell, and the answer carries what both returned.

Usage: ``uv run --frozen python tools/check_install.py`` (exit status 0 when all held).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dsh.testing.model_servers import ChatReply, ChatToolCall, OpenAIChatServer
from dsh.testing.model_servers._http import RecordedRequest

ROOT = Path(__file__).resolve().parent.parent
KEY = "sk-check-install"
TOKEN = "the launch code is tangerine-4711"
TASK = "Read notes.txt and run the build-number command."
INSTALL_TIMEOUT = 900.0
RUN_TIMEOUT = 120.0


def _script(request: RecordedRequest) -> ChatReply:
    """read_file, then shell, then an answer quoting both results."""
    body = request.json if isinstance(request.json, Mapping) else {}
    messages: list[Mapping[str, Any]] = [
        m for m in body.get("messages") or [] if isinstance(m, Mapping)
    ]
    results = [str(m.get("content") or "") for m in messages if m.get("role") == "tool"]
    if not results:
        return ChatReply(tool_calls=[ChatToolCall("read_file", {"path": "notes.txt"})])
    if len(results) == 1:
        return ChatReply(tool_calls=[ChatToolCall("shell", {"command": "echo build-$((6 * 7))"})])
    return ChatReply(text="FILE: " + results[0] + "\nSHELL: " + results[1])


def _fail(what: str, done: subprocess.CompletedProcess[str] | None = None) -> None:
    print(f"check_install: FAILED: {what}", file=sys.stderr)
    if done is not None:
        print(f"--- exit status {done.returncode}", file=sys.stderr)
        print("--- stdout\n" + done.stdout[-4000:], file=sys.stderr)
        print("--- stderr\n" + done.stderr[-4000:], file=sys.stderr)
    raise SystemExit(1)


def _user_env(home: Path, path: str) -> dict[str, str]:
    """The environment of a user whose home is ``home``: no model, no uv tool folders,
    no XDG folders, no virtual environment of ours."""
    drop = ("OPENAI_", "DEEPSEEK_", "ANTHROPIC_", "XDG_", "UV_", "VIRTUAL_ENV", "PYTHON")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(HOME=str(home), PATH=path)
    return env


def main() -> int:
    """Install into a throwaway home, then run the installed ``dsh``."""
    uv = shutil.which("uv")
    if uv is None:
        _fail("uv is not on PATH (tools/ensure-uv.sh installs it)")
    assert uv is not None
    # The packages downloaded already serve the throwaway home too (only speed: a fresh
    # cache would fetch the same files from the index).
    cache = subprocess.run([uv, "cache", "dir"], capture_output=True, text=True, check=True)
    system_path = os.pathsep.join(
        p for p in ("/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin") if Path(p).is_dir()
    )
    with tempfile.TemporaryDirectory(prefix="dsh-check-install-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        bin_dir = home / ".local" / "bin"
        # What runs install.sh: uv where it is, python3 for ensure-uv, the system's tools.
        # Not this checkout's environment (`uv run` puts .venv/bin first).
        outer = [
            p
            for p in os.environ.get("PATH", "").split(os.pathsep)
            if p and not Path(p).resolve().is_relative_to(ROOT)
        ]
        install_path = os.pathsep.join([str(Path(uv).parent), *outer, system_path])
        env = _user_env(home, install_path)
        env["UV_CACHE_DIR"] = cache.stdout.strip()
        print(f"check_install: tools/install.sh with HOME={home}", file=sys.stderr)
        done = subprocess.run(
            ["bash", str(ROOT / "tools" / "install.sh")],
            cwd=home,
            env=env,
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
        if done.returncode != 0:
            _fail("tools/install.sh", done)
        dsh = bin_dir / "dsh"
        if not os.access(dsh, os.X_OK):
            _fail(f"tools/install.sh did not put dsh in {bin_dir}", done)
        if f"installed {dsh}" not in done.stdout or "export PATH=" not in done.stdout:
            _fail("tools/install.sh did not say where dsh is and how to reach it", done)
        shebang = dsh.read_text(errors="replace").splitlines()[0]
        if str(home) not in shebang:
            _fail(f"{dsh} does not run a tool environment under {home}: {shebang}")

        user_env = _user_env(home, os.pathsep.join([str(bin_dir), system_path]))
        if shutil.which("dsh", path=user_env["PATH"]) != str(dsh):
            _fail(f"dsh on the user's PATH is not {dsh}")
        done = subprocess.run(
            ["dsh", "--help"],
            env=user_env,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
        for command in ("run", "acp", "init", "presets", "demo"):
            if done.returncode != 0 or command not in done.stdout:
                _fail(f"dsh --help does not list {command!r}", done)

        work = Path(tmp) / "some-project"
        work.mkdir()
        (work / "notes.txt").write_text(f"Notes.\n{TOKEN}\n")
        with OpenAIChatServer(default=_script, api_key=KEY) as server:
            run_env = dict(user_env, OPENAI_BASE_URL=server.api_base, OPENAI_API_KEY=KEY)
            done = subprocess.run(
                ["dsh", "run", "--yes", TASK],
                cwd=work,
                env=run_env,
                capture_output=True,
                text=True,
                timeout=RUN_TIMEOUT,
                stdin=subprocess.DEVNULL,
            )
            requests = len(server.requests)
        if done.returncode != 0:
            _fail("dsh run exited non-zero", done)
        if TOKEN not in done.stdout or "SHELL: build-42" not in done.stdout:
            _fail("dsh run's answer lacks the file's text or the shell's output", done)
        if requests != 3 or "OPENAI_BASE_URL is set" not in done.stderr:
            _fail(f"dsh run made {requests} model requests (expected 3)", done)
    print("check_install: the installed dsh works (--help, dsh run on OPENAI_BASE_URL)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
