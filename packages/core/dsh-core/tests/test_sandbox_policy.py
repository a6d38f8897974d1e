"""The sandbox policy: the preset's [sandbox] table, narrowing down a delegation tree
(strict for rows, clamped for a parent process's ceiling), protected paths, and the
policy a parent process passes in DSH_SANDBOX."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from dsh.core import Context, PresetError, load_preset, parse_preset
from dsh.core.permissions import SANDBOX_ENV, SandboxConfig, SandboxError, SandboxPolicy

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

BASE = '[agent.model]\nadapter = "scripted"\n'
DOCS = Path(__file__).resolve().parents[4] / "docs" / "security.md"


def test_defaults_are_workspace_write_without_network() -> None:
    policy = SandboxPolicy.from_config(None)
    assert (policy.mode, policy.network) == ("workspace-write", False)
    assert policy.writable_dirs("/w") == ("/w",)
    assert policy.describe() == "workspace-write, network off"


def test_a_row_only_narrows() -> None:
    root = SandboxPolicy.from_config(SandboxConfig(writable_roots=["/opt/cache"]))
    reader = root.narrowed(SandboxConfig(mode="read-only"))
    assert reader.mode == "read-only"
    assert reader.writable_dirs("/w") == ()
    with pytest.raises(SandboxError, match=r'"workspace-write", wider than the "read-only"'):
        reader.narrowed(SandboxConfig(mode="workspace-write"), what="row x")
    with pytest.raises(SandboxError, match="row y asks for network = true"):
        root.narrowed(SandboxConfig(network=True), what="row y")
    with pytest.raises(SandboxError, match='"off"'):
        root.narrowed(SandboxConfig(mode="off"))
    # writable sets intersect: a row's root outside the parent's is not writable, and a
    # parent's root the row does not list is not either
    narrowed = root.narrowed(SandboxConfig(writable_roots=["/w/sub", "/elsewhere"]))
    assert set(narrowed.writable_dirs("/w")) == {"/w", "/w/sub"}


def test_a_parent_processes_ceiling_clamps_the_childs_own_preset() -> None:
    parent = SandboxPolicy.from_config(SandboxConfig(mode="read-only")).pinned("/w")
    inherited = SandboxPolicy.from_json(parent.to_json())
    own = SandboxPolicy.from_config(SandboxConfig(mode="off", network=True))
    child = inherited.narrowed(own, strict=False)
    assert (child.mode, child.network) == ("read-only", False)
    wide = SandboxPolicy.from_config(None).pinned("/w")
    elsewhere = SandboxPolicy.from_json(wide.to_json()).narrowed(
        SandboxPolicy.from_config(None), strict=False
    )
    assert elsewhere.writable_dirs("/w/sub") == ("/w/sub",)
    assert elsewhere.writable_dirs("/other") == ()  # not writable for the parent either


def test_the_directories_a_sandbox_mounts_writable() -> None:
    policy = SandboxPolicy.from_config(SandboxConfig(writable_roots=["/w/sub", "/opt/cache"]))
    # a directory inside another is mounted with it; extras only where writes are allowed
    assert policy.bind_dirs("/w", ["/opt/cache/x", "/state"]) == ("/w", "/opt/cache", "/state")
    reader = policy.narrowed(SandboxConfig(mode="read-only"))
    assert reader.bind_dirs("/w", ["/state"]) == ()
    assert SandboxPolicy.inside("/w/a/b", ["/x", "/w"])
    assert SandboxPolicy.inside("/w", ["/w"])
    assert not SandboxPolicy.inside("/wx/a", ["/w"])
    assert SandboxPolicy.inside("/anything", ["/"])


@pytest.mark.parametrize("text", ["", "{", '{"mode": "wide"}', '{"mode": "off"}'])
def test_a_malformed_inherited_policy_is_an_error(text: str) -> None:
    with pytest.raises(SandboxError, match=SANDBOX_ENV):
        SandboxPolicy.from_json(text)


def test_protected_paths(tmp_path: Path) -> None:
    preset_file = tmp_path / "dsh.toml"
    preset_file.write_text(BASE)
    policy = SandboxPolicy.from_config(None, protected=[str(preset_file)])
    cwd = str(tmp_path)
    for path in (".git/config", ".git/hooks/pre-commit", "sub/.git/config", ".dsh/state"):
        reason = policy.write_refusal(str(tmp_path / path), cwd=cwd)
        assert reason is not None
        assert "protected" in reason
    assert "preset file" in (policy.write_refusal(str(preset_file), cwd=cwd) or "")
    assert policy.write_refusal(str(tmp_path / "notes.txt"), cwd=cwd) is None
    allowed = str(tmp_path / ".git" / "hooks")
    assert policy.write_refusal(allowed + "/pre-commit", cwd=cwd, allow=[allowed]) is None
    assert "outside" in (policy.write_refusal("/etc/passwd", cwd=cwd) or "")
    # a workspace that itself lies under a .dsh folder is not protected from itself
    nested = tmp_path / ".dsh" / "worktrees" / "x"
    nested.mkdir(parents=True)
    assert policy.write_refusal(str(nested / "notes.txt"), cwd=str(nested)) is None
    assert policy.write_refusal(str(nested / ".git" / "config"), cwd=str(nested)) is not None


def test_the_preset_table_and_its_files(tmp_path: Path) -> None:
    base = tmp_path / "base.toml"
    base.write_text(BASE + '[sandbox]\nmode = "read-only"\n')
    top = tmp_path / "dsh.toml"
    top.write_text('extends = "base.toml"\n[sandbox]\nnetwork = true\n')
    preset = load_preset(top)
    assert preset.files == [str(top.resolve()), str(base.resolve())]
    assert (preset.sandbox.mode, preset.sandbox.network) == ("read-only", True)
    with pytest.raises(PresetError, match=r"\[sandbox\]: .*mode"):
        parse_preset(BASE + '[sandbox]\nmode = "wide-open"\n')
    with pytest.raises(PresetError, match="absolute"):
        parse_preset(BASE + '[sandbox]\nwritable_roots = ["relative"]\n')


async def test_the_context_protects_its_preset_files_and_takes_the_inherited_ceiling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    preset_file = tmp_path / "dsh.toml"
    preset_file.write_text(BASE + '[sandbox]\nmode = "off"\nnetwork = true\n')
    async with Context.open(load_preset(preset_file), cwd=tmp_path) as ctx:
        assert ctx.sandbox.mode == "off"
        assert str(preset_file.resolve()) in ctx.sandbox.protected
    ceiling = SandboxPolicy.from_config(SandboxConfig(mode="read-only")).pinned(str(tmp_path))
    monkeypatch.setenv(SANDBOX_ENV, ceiling.to_json())
    async with Context.open(load_preset(preset_file), cwd=tmp_path) as ctx:
        assert (ctx.sandbox.mode, ctx.sandbox.network) == ("read-only", False)
        child = ctx.agents.create(parent=ctx.agents.create())
        assert child.sandbox.mode == "read-only"


def test_the_docs_table_is_generated_from_the_model() -> None:
    """docs/security.md's [sandbox] table cannot drift from SandboxConfig: it is the
    table tools/docs/config_tables.py generates from the model (keys, types, defaults,
    docstrings), so a field added, renamed or re-documented without the page fails."""
    path = DOCS.parents[1] / "tools" / "docs" / "config_tables.py"
    spec = importlib.util.spec_from_file_location("dsh_docs_config_tables", path)
    assert spec is not None
    assert spec.loader is not None
    tables = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = tables  # dataclasses look their module up
    try:
        spec.loader.exec_module(tables)
        generated = tables.table(tables.Spec("dsh.core.permissions:SandboxConfig"))
    finally:
        del sys.modules[spec.name]
    text = DOCS.read_text(encoding="utf-8")
    begin = "<!-- config-table: dsh.core.permissions:SandboxConfig -->\n"
    start = text.index(begin) + len(begin)
    table = text[start : text.index("<!-- /config-table -->", start)]
    assert table.rstrip("\n").split("\n") == generated
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", table, flags=re.MULTILINE))
    assert documented == set(SandboxConfig.model_fields)
