"""If the process running the provider dies outright, codex and its tools go too.

The provider does not use PR_SET_PDEATHSIG (it would make every spawn a full
fork); codex exits on stdin EOF, which the kernel delivers when its parent dies.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from dsh.testing.processes import cmdline

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


async def test_sigkilled_parent_takes_codex_and_its_tool_down(
    codex: Any, procs: Any, tmp_path: Path
) -> None:
    config_file = tmp_path / "config.json"
    config_file.write_text(json.dumps(codex.config(permission_mode="full-access")))
    script = Path(__file__).with_name("delegate_forever.py")
    parent = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        str(config_file),
        str(codex.workspace),
        "run sleep",
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert parent.stdout is not None
        assert await asyncio.wait_for(parent.stdout.readline(), 30) == b"published\n"

        def tool_running() -> bool:
            tree = procs.tree({parent.pid})
            return any("sleep 300" in cmdline(pid) for pid in tree)

        await procs.wait_for(tool_running, timeout=30)
        tree = procs.tree({parent.pid}) - {parent.pid}
        assert procs.codex() & tree
        parent.send_signal(signal.SIGKILL)
        await parent.wait()
        gone_after = await procs.wait_gone(tree, timeout=1.0)
    finally:
        if parent.returncode is None:
            parent.kill()
            await parent.wait()
    assert gone_after < 1.0
    print(f"parent SIGKILLed: codex and its tool gone after {gone_after * 1000:.0f} ms")
