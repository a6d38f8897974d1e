"""A tool row whose provider no row registers names the fix from the installed
providers (the ``dsh.providers`` entry points), whatever their distributions are
called: here ``acme-agents``, installed on ``sys.path`` by the test with a real module."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dsh.core import Context, parse_preset
from dsh.core.plugins import PluginError

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

MODULE = "acme_agents_for_dsh_tests"

ACME = '''
"""The acme provider: a scripted child, registered as "acme"."""
from pydantic import BaseModel

from dsh.core import Plugin
from dsh.subagent import ALL_START_CAPABILITIES, SubagentRuntime
from dsh.testing.scripted_provider import ScriptedProvider


class Config(BaseModel):
    pass


def apply(ctx, config, effects):
    provider = ScriptedProvider("acme", reply="from acme", capabilities=ALL_START_CAPABILITIES)
    effects.add(SubagentRuntime.of(ctx).register_provider(provider))


plugin = Plugin("acme-agents", apply, Config)
'''

TOOL_ROW = """
[[plugin]]
name = "dsh-tool-subagent"
config = {{ provider = "{provider}", tool_name = "delegate" }}
"""


@pytest.fixture
def acme_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``acme-agents`` 1.0: a module and its metadata, found on ``sys.path``."""
    (tmp_path / f"{MODULE}.py").write_text(ACME)
    info = tmp_path / "acme_agents-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-agents\nVersion: 1.0\n")
    entry = f"{MODULE}:plugin"
    (info / "entry_points.txt").write_text(
        f"[dsh.plugins]\nacme-agents = {entry}\n\n[dsh.providers]\nacme = {entry}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop(MODULE, None)


async def load_failure(preset: str) -> str:
    with pytest.raises(PluginError) as info:
        async with Context.open(parse_preset(preset)):
            pass
    return str(info.value)


async def test_the_fix_names_the_row_of_an_installed_provider(acme_installed: None) -> None:
    base = '[agent.model]\nadapter = "scripted"\n'
    message = await load_failure(base + TOOL_ROW.format(provider="acme"))
    assert 'tool "delegate": no subagent provider named "acme" is registered' in message
    assert 'provider "acme" is installed: add a [[plugin]] row with name = "acme-agents"' in (
        message
    )
    assert MODULE not in sys.modules  # named from its metadata, not imported

    message = await load_failure(base + TOOL_ROW.format(provider="ghost"))
    assert "add a [[plugin]] row for the provider's plugin (installed providers not loaded:" in (
        message
    )
    assert '"acme" (plugin "acme-agents")' in message

    # the row the message names is the fix
    preset = base + '[[plugin]]\nname = "acme-agents"\n' + TOOL_ROW.format(provider="acme")
    async with Context.open(parse_preset(preset)) as ctx:
        assert "delegate" in ctx.tools
