"""The installed providers are read from the ``dsh.providers`` entry points of the
installed distributions, without importing them."""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import pytest

from dsh.subagent import InstalledProvider, installed_providers
from dsh.subagent._installed import unregistered_provider_fix

pytestmark = pytest.mark.timeout(30)

# The providers of this repository: distribution -> the provider's short name.
OURS = {
    "dsh-subagent-a2a": "a2a",
    "dsh-subagent-acp": "acp",
    "dsh-subagent-claude-code": "claude-code",
    "dsh-subagent-codex": "codex",
    "dsh-subagent-example-echo": "echo",
    "dsh-subagent-fork-in-process": "fork",
    "dsh-subagent-spawn-in-process": "spawn",
    "dsh-subagent-temporal": "temporal",
}


@pytest.fixture
def acme(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A distribution ``acme-agents`` on ``sys.path`` (metadata only: its module does
    not exist, so listing it must not import it), with two providers."""
    info = tmp_path / "acme_agents-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-agents\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[dsh.plugins]\nacme-agents = acme_missing_module:plugin\n\n"
        "[dsh.providers]\nacme = acme_missing_module:plugin\n"
        "acme-fast = acme_missing_module:fast\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return "acme_missing_module"


def test_an_installed_distribution_is_listed_without_importing_it(acme: str) -> None:
    listed = {provider.name: provider for provider in installed_providers()}
    assert listed["acme"] == InstalledProvider(
        "acme", "acme-agents", "acme-agents", "acme_missing_module:plugin"
    )
    # another object of the same distribution: its only plugin row
    assert listed["acme-fast"].plugin == "acme-agents"
    assert acme not in sys.modules
    names = [provider.name for provider in installed_providers()]
    assert names == sorted(names)


def test_the_fix_names_the_row_or_what_is_installed(acme: str) -> None:
    assert unregistered_provider_fix("acme") == (
        'provider "acme" is installed: add a [[plugin]] row with name = "acme-agents"'
    )
    fix = unregistered_provider_fix("ghost", registered=["acme"])
    assert fix.startswith('use a registered provider ("acme"); installed, not loaded (add its')
    assert '"acme-fast" (plugin "acme-agents")' in fix
    assert '"acme" (plugin' not in fix  # registered already


def test_every_provider_of_this_repository_that_is_installed_is_listed() -> None:
    listed = {provider.name: provider for provider in installed_providers()}
    for name, short in OURS.items():
        try:
            distribution(name)
        except PackageNotFoundError:
            continue  # (a package-isolated test run has none of them)
        assert short in listed, f"{name} declares no dsh.providers entry {short!r}"
        assert (listed[short].plugin, listed[short].distribution) == (name, name)
