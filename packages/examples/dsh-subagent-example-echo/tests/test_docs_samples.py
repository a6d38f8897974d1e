"""docs/writing-a-provider.md runs as written: every Python block, in order, in one
namespace; and the blocks that show this package's source are identical to it."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsh.testing.docs import extract_python_blocks, run_python_blocks, source_region

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[4]
PAGE = ROOT / "docs" / "writing-a-provider.md"


def test_the_page_shows_the_sources_as_they_are() -> None:
    shown = [block for block in extract_python_blocks(PAGE) if block.source is not None]
    assert {block.source for block in shown} == {
        "packages/examples/dsh-subagent-example-echo/src/dsh/subagent_example_echo/"
        "_provider.py#provider",
        "packages/examples/dsh-subagent-example-echo/tests/test_conformance.py#conformance",
    }
    for block in shown:
        assert block.source is not None
        path, _, region = block.source.partition("#")
        assert block.code == source_region(ROOT / path, region), (
            f"{block.where} no longer shows {block.source}: copy the region into the page"
        )


def test_every_python_sample_runs_as_written() -> None:
    blocks = extract_python_blocks(PAGE)
    assert len(blocks) >= 8
    namespace = run_python_blocks(blocks)
    assert namespace["result"].output == "Checked: the logs"  # the last sample ran
