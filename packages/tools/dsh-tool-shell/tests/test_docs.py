"""The samples in docs/tools.md and the two tool READMEs work as written."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from dsh.core import AbortSignal, Context, ToolContext, parse_preset

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

ROOT = Path(__file__).resolve().parents[4]
PAGES = [
    ROOT / "docs" / "tools.md",
    ROOT / "packages" / "tools" / "dsh-tool-fs" / "README.md",
    ROOT / "packages" / "tools" / "dsh-tool-shell" / "README.md",
]
_BLOCK = re.compile(r"^( *)```(\w+)\n(.*?)^\1```", re.MULTILINE | re.DOTALL)


def blocks(page: Path, language: str) -> list[str]:
    found = []
    for match in _BLOCK.finditer(page.read_text()):
        if match[2] == language:
            indent = len(match[1])
            found.append("".join(line[indent:] for line in match[3].splitlines(True)))
    return found


TOML_SAMPLES = [
    pytest.param(page, index, sample, id=f"{page.parent.name}/{page.name}#{index}")
    for page in PAGES
    for index, sample in enumerate(blocks(page, "toml"))
]


def test_the_pages_have_samples() -> None:
    assert len(TOML_SAMPLES) >= 8


@pytest.mark.parametrize(("page", "index", "sample"), TOML_SAMPLES)
async def test_toml_samples_load_as_presets(
    page: Path, index: int, sample: str, tmp_path: Path
) -> None:
    preset = '[agent.model]\nadapter = "scripted"\n' + sample
    if "[permissions" in sample:  # a permissions table needs the tools it names
        preset += '[[plugin]]\nname = "dsh-tool-fs"\n[[plugin]]\nname = "dsh-tool-shell"\n'
    if "dsh-tool-subagent" in sample:
        preset += '[[plugin]]\nname = "dsh-subagent-spawn-in-process"\n'
    async with Context.open(parse_preset(preset), cwd=tmp_path) as ctx:
        assert ctx.tools.names()


async def test_the_approver_sample_runs(tmp_path: Path) -> None:
    (sample,) = blocks(ROOT / "docs" / "tools.md", "python")
    preset = '[agent.model]\nadapter = "scripted"\n[[plugin]]\nname = "dsh-tool-shell"\n'
    async with Context.open(parse_preset(preset), cwd=tmp_path) as ctx:
        parent = ctx.agents.create()
        namespace: dict[str, Any] = {"ctx": ctx, "parent": parent}
        exec(compile(sample, "docs/tools.md", "exec"), namespace)
        assert ctx.permissions.allow_all  # the sample's last line
        ctx.permissions.allow_all = False
        shell = ctx.tools.get("shell")
        assert shell is not None

        async def run(command: str) -> str:
            tctx = ToolContext(parent, "c", AbortSignal())
            result = await shell.invoke({"command": command}, tctx)
            return str(result.content)

        assert await run("rm -f nothing") == "no deleting"
        assert await run("echo fine") == "fine\n[exit status 0]"
