"""The shell tool inside the OS sandbox (bubblewrap), attacked as a hostile model would:
secrets in /proc, escapees that clear their environment, writes outside the workspace
and to protected paths, the network, and a sandbox that cannot start."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from dsh.core import AbortSignal, Context, ToolContext, parse_preset
from dsh.core.permissions import SandboxConfig, SandboxError
from dsh.core.plugins import PluginError
from dsh.testing.processes import cmdline, live_children, process_tree
from dsh.tool_shell._run import run_command

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

BASE = '[agent.model]\nadapter = "scripted"\n'


def preset(sandbox: str = "", row: str = "") -> str:
    table = f"[sandbox]\n{sandbox}\n" if sandbox else ""
    config = f"config = {{ {row} }}\n" if row else ""
    return BASE + table + '[[plugin]]\nname = "dsh-tool-shell"\n' + config


async def run(ctx: Context, command: str) -> str:
    ctx.permissions.allow_all = True
    tool = ctx.tools.get("shell")
    assert tool is not None
    result = await tool.invoke(
        {"command": command}, ToolContext(ctx.agents.create(), "c", AbortSignal())
    )
    assert isinstance(result.content, str)
    return result.content


@pytest.fixture
def outside() -> Iterator[Path]:
    """A directory outside the workspace and outside /tmp (the workspace is under it)."""
    base = Path(os.environ.get("DSH_TEST_OUTSIDE_DIR", "/var/tmp"))
    folder = base / f"dsh-sandbox-test-{os.getpid()}-{time.monotonic_ns()}"
    folder.mkdir(parents=True)
    yield folder
    subprocess.run(["rm", "-rf", str(folder)], check=False)


async def test_parent_secrets_are_not_readable_from_proc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DSH_TEST_SECRET_KEY", "sk-in-the-parent-only")
    # The environment block /proc shows is the one the process started with: put the
    # secret there for real by asking a Python child that holds it to run the tool.
    script = (
        "import anyio, sys\n"
        "from dsh.core import Context, parse_preset, AbortSignal, ToolContext\n"
        f"PRESET = {preset()!r}\n"
        "async def main():\n"
        f"    async with Context.open(parse_preset(PRESET), cwd={str(tmp_path)!r}) as ctx:\n"
        "        ctx.permissions.allow_all = True\n"
        "        tool = ctx.tools.get('shell')\n"
        "        r = await tool.invoke({'command': sys.argv[1]},"
        " ToolContext(ctx.agents.create(), 'c', AbortSignal()))\n"
        "        print(r.content)\n"
        "anyio.run(main)\n"
    )
    probe = (
        "for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f 2>/dev/null; done"
        " | grep -c sk-in-the-parent-only; echo ppid=$PPID"
    )
    done = await anyio.run_process(
        [sys.executable, "-c", script, probe], check=False, env=dict(os.environ)
    )
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()
    assert out.splitlines()[0] == "0", out  # the secret is nowhere the command can read
    # and the command cannot even see the dsh process: its parent is the sandbox's init
    assert "ppid=1" in out or "ppid=0" in out, out


async def test_an_escapee_that_clears_its_environment_dies_with_the_call(tmp_path: Path) -> None:
    marker = f"9{time.monotonic_ns() % 10**6}.5"
    before = live_children()
    async with Context.open(parse_preset(preset()), cwd=tmp_path) as ctx:
        out = await run(ctx, f"setsid env -i /bin/sleep {marker} >/dev/null 2>&1 & echo started")
    assert out.startswith("started")

    def escapees() -> list[int]:
        found = []
        for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
            if marker in cmdline(pid):
                found.append(pid)
        return found

    with anyio.fail_after(10):
        while escapees():
            await anyio.sleep(0.05)
    assert not process_tree(live_children() - before)


async def test_writes_stay_in_the_workspace(tmp_path: Path, outside: Path) -> None:
    async with Context.open(parse_preset(preset()), cwd=tmp_path) as ctx:
        out = await run(ctx, f"echo in > inside.txt && echo out > {outside}/x.txt; echo rc=$?")
    assert (tmp_path / "inside.txt").read_text() == "in\n"
    assert not (outside / "x.txt").exists()
    assert "Read-only file system" in out


async def test_tmp_is_read_only_and_tmpdir_is_private(tmp_path: Path) -> None:
    async with Context.open(parse_preset(preset()), cwd=tmp_path.parent) as ctx:
        # cwd is a folder under /tmp: it is writable, the rest of /tmp is not
        name = f"dsh-sandbox-{os.getpid()}-{time.monotonic_ns()}"
        out = await run(ctx, f'echo x > /tmp/{name}; f=$(mktemp) && echo ok > "$f" && echo "$f"')
    assert not Path("/tmp", name).exists()
    assert "/dev/shm/" in out


async def test_protected_paths_are_read_only(tmp_path: Path) -> None:
    (tmp_path / ".git" / "hooks").mkdir(parents=True)
    (tmp_path / ".git" / "config").write_text("[core]\n")
    (tmp_path / ".dsh").mkdir()
    preset_file = tmp_path / "dsh.toml"
    preset_file.write_text(preset())
    from dsh.core import load_preset

    async with Context.open(load_preset(preset_file), cwd=tmp_path) as ctx:
        out = await run(
            ctx,
            "echo '[core] fsmonitor = touch pwned' >> .git/config;"
            " echo 'touch pwned' > .git/hooks/pre-commit;"
            " echo x > .dsh/state; echo 'shell = 1' >> dsh.toml; echo done",
        )
    assert out.count("Read-only file system") == 4, out
    assert (tmp_path / ".git" / "config").read_text() == "[core]\n"
    assert not (tmp_path / ".git" / "hooks" / "pre-commit").exists()
    assert not (tmp_path / ".dsh" / "state").exists()
    assert preset_file.read_text() == preset()


async def test_allow_write_opens_one_protected_path(tmp_path: Path) -> None:
    (tmp_path / ".git" / "hooks").mkdir(parents=True)
    row = 'allow_write = [".git/hooks"]'
    async with Context.open(parse_preset(preset(row=row)), cwd=tmp_path) as ctx:
        await run(ctx, "echo ok > .git/hooks/pre-commit; echo x > .git/config")
    assert (tmp_path / ".git" / "hooks" / "pre-commit").read_text() == "ok\n"
    assert not (tmp_path / ".git" / "config").exists()


async def test_read_only_mode_and_a_narrowing_row(tmp_path: Path) -> None:
    async with Context.open(parse_preset(preset('mode = "read-only"')), cwd=tmp_path) as ctx:
        out = await run(ctx, "echo x > a.txt")
    assert not (tmp_path / "a.txt").exists()
    assert "Read-only" in out
    row = 'sandbox = { mode = "read-only" }'
    async with Context.open(parse_preset(preset(row=row)), cwd=tmp_path) as ctx:
        await run(ctx, "echo x > b.txt")
    assert not (tmp_path / "b.txt").exists()


async def test_a_child_agent_is_never_wider_than_its_parent(tmp_path: Path) -> None:
    async with Context.open(parse_preset(preset()), cwd=tmp_path) as ctx:
        parent = ctx.agents.create()
        child = ctx.agents.create(parent=parent, sandbox=parent.sandbox.narrowed(None))
        reader = ctx.agents.create(parent=parent, sandbox=SandboxConfig(mode="read-only"))
        grandchild = ctx.agents.create(parent=reader)
        assert grandchild.sandbox.mode == "read-only"
        with pytest.raises(SandboxError, match="wider"):
            ctx.agents.create(parent=reader, sandbox=SandboxConfig(mode="workspace-write"))
        ctx.permissions.allow_all = True
        tool = ctx.tools.get("shell")
        assert tool is not None
        for agent, name in ((child, "child.txt"), (grandchild, "grandchild.txt")):
            await tool.invoke(
                {"command": f"echo x > {name}"}, ToolContext(agent, "c", AbortSignal())
            )
    assert (tmp_path / "child.txt").exists()
    assert not (tmp_path / "grandchild.txt").exists()


async def test_the_network_is_off_unless_allowed(tmp_path: Path) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        probe = (
            f"{sys.executable} -c \"import socket; socket.create_connection(('127.0.0.1', {port}),"
            " timeout=5); print('connected')\""
        )
        async with Context.open(parse_preset(preset()), cwd=tmp_path) as ctx:
            closed = await run(ctx, probe)
        async with Context.open(parse_preset(preset("network = true")), cwd=tmp_path) as ctx:
            opened = await run(ctx, probe)
    assert "connected" not in closed
    assert "refused" in closed.lower()
    assert "connected" in opened


async def test_a_row_cannot_widen_the_preset(tmp_path: Path) -> None:
    with pytest.raises(PluginError, match="network = true"):
        async with Context.open(parse_preset(preset(row="sandbox = { network = true }"))):
            pass
    with pytest.raises(PluginError, match='"off"'):
        async with Context.open(
            parse_preset(preset('mode = "read-only"', row='sandbox = { mode = "off" }'))
        ):
            pass


async def test_off_runs_unsandboxed_only_when_written(tmp_path: Path) -> None:
    async with Context.open(parse_preset(preset('mode = "off"')), cwd=tmp_path) as ctx:
        out = await run(ctx, "echo ppid=$PPID")
    assert "ppid=1\n" not in out  # the shell's parent is dsh itself


async def test_a_missing_bubblewrap_fails_loud_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dsh.core.permissions import SandboxPolicy
    from dsh.subprocess import Sandbox, _sandbox

    monkeypatch.setattr(_sandbox, "_checked", None)
    monkeypatch.setattr(_sandbox, "BWRAP", "bwrap-not-installed-here")
    result = await run_command(
        ["/bin/sh", "-c", f"touch {tmp_path}/ran"],
        cwd=str(tmp_path),
        env={"PATH": os.environ["PATH"]},
        timeout=10,
        max_output_bytes=1024,
        term_grace=1,
        signal=AbortSignal(),
        sandbox=Sandbox(SandboxPolicy()),
    )
    assert result.outcome == "not-started"
    assert result.reason is not None
    assert "apt-get install bubblewrap" in result.reason
    assert 'mode = "off"' in result.reason
    assert not (tmp_path / "ran").exists()
