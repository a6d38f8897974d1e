"""``ChildProcess.start(sandbox=...)``: the bubblewrap command line a policy makes, and a
real process inside it (own PID namespace, read-only root, protected paths, the policy
passed on in DSH_SANDBOX, a missing command said before bubblewrap runs)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dsh.core.permissions import SANDBOX_ENV, SandboxConfig, SandboxPolicy
from dsh.subprocess import ChildProcess, ProcessStartError, Sandbox, scrubbed_env

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


def test_the_command_line(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    preset = tmp_path / "dsh.toml"
    preset.write_text("")
    policy = SandboxPolicy.from_config(None, protected=[str(preset)])
    argv = Sandbox(policy, allow_write=(str(tmp_path / ".git"),)).wrap(["true"], str(tmp_path))
    assert argv[0].endswith("bwrap")
    assert "--unshare-net" in argv
    assert "--unshare-pid" in argv
    assert "--die-with-parent" in argv
    assert argv[-2:] == ["--", "true"]
    text = " ".join(argv)
    root = str(tmp_path.resolve())
    assert f"--bind {root} {root}" in text
    assert f"--ro-bind {preset.resolve()} {preset.resolve()}" in text
    # .git is protected, then opened again by allow_write (the later mount wins)
    assert text.index(f"--ro-bind {root}/.git") < text.index(f"--bind {root}/.git {root}/.git")
    networked = Sandbox(policy.narrowed(None), share_network=True).wrap(["true"], root)
    assert "--unshare-net" not in networked
    reader = Sandbox(policy.narrowed(SandboxConfig(mode="read-only"))).wrap(["true"], root)
    assert "--bind" not in reader
    off = SandboxPolicy.from_config(SandboxConfig(mode="off"))
    assert Sandbox(off).wrap(["true"], root) == ["true"]


async def _run(argv: list[str], cwd: Path, sandbox: Sandbox) -> tuple[int, str]:
    child = await ChildProcess.start(
        argv, env=scrubbed_env(), cwd=str(cwd), what="probe", sandbox=sandbox
    )
    try:
        output = await child.stdout.read()
        return await child.wait(), output.decode()
    finally:
        await child.terminate(eof_grace=0, term_grace=1)


async def test_a_process_in_the_sandbox(tmp_path: Path) -> None:
    (tmp_path / ".dsh").mkdir()
    script = (
        "echo pid=$$; echo ok > out.txt; echo x > .dsh/state 2>/dev/null || echo protected;"
        ' echo "tmpdir=$TMPDIR"; echo "$DSH_SANDBOX"'
    )
    status, out = await _run(["/bin/sh", "-c", script], tmp_path, Sandbox(SandboxPolicy()))
    assert status == 0
    assert "pid=2" in out or "pid=1" in out
    assert "protected" in out
    assert "tmpdir=/dev/shm" in out
    assert (tmp_path / "out.txt").read_text() == "ok\n"
    inherited = SandboxPolicy.from_json(out.strip().splitlines()[-1])
    assert inherited.writable_dirs("/anywhere") == (str(tmp_path.resolve()),)
    assert SANDBOX_ENV not in os.environ


async def test_a_missing_command_is_named_before_bubblewrap_runs(tmp_path: Path) -> None:
    with pytest.raises(ProcessStartError, match="'dsh-no-such-command': No such file"):
        await _run(["dsh-no-such-command"], tmp_path, Sandbox(SandboxPolicy()))
    (tmp_path / "script.sh").write_text("#!/bin/sh\n")
    with pytest.raises(ProcessStartError, match="Permission denied"):
        await _run(["./script.sh"], tmp_path, Sandbox(SandboxPolicy()))
