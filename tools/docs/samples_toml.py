"""TOML samples, for check_samples.py: a preset is parsed and loaded (every plugin row
found, configured and applied); other TOML must name its file and is only parsed."""

from __future__ import annotations

import asyncio
import json
import re
import tomllib
from pathlib import Path
from typing import Any

from samples_page import PageReport, Sample

PRESET_KEYS = {"extends", "agent", "plugin", "permissions", "sandbox"}


def is_preset(data: dict[str, Any]) -> bool:
    return bool(data) and set(data) <= PRESET_KEYS


def preset_text(sample: Sample) -> str:
    """The sample's TOML; after ``<!-- preset: extends NAME -->``, the rows a dsh.toml
    that extends NAME adds (``extends = "NAME"`` goes first)."""
    how = sample.comment("preset")
    if how is None:
        return sample.code
    matched = re.fullmatch(r"extends\s+(\S+)", how)
    if not matched:
        raise ValueError(f"{sample.where}: '<!-- preset: extends NAME -->' expected")
    return f"extends = {json.dumps(matched[1])}\n{sample.code}"


async def load_preset_sample(text: str, scratch: Path) -> None:
    from dsh.core import Context, parse_preset

    preset = parse_preset(text, source="the sample", base_dir=scratch)
    async with Context.open(preset, cwd=scratch):
        pass


def check_toml(sample: Sample, scratch: Path, report: PageReport) -> None:
    try:
        data = tomllib.loads(sample.code)
    except tomllib.TOMLDecodeError as exc:
        report.add(sample, "parsed", False, f"not TOML: {exc}")
        return
    if not is_preset(data):
        if sample.title is None and sample.comment("recipe") is None:
            report.add(
                sample,
                "parsed",
                False,
                "TOML that is not a preset (top-level keys other than"
                f" {', '.join(sorted(PRESET_KEYS))}) must name its file:"
                ' ```toml title="pyproject.toml"```; or make it a whole preset',
            )
        else:
            report.add(sample, "parsed", detail=f"TOML ({sample.title})")
        return
    reason = sample.not_run
    if reason is not None:
        report.add(sample, "not run", detail=f"TOML parsed, not loaded: {reason}")
        return
    try:
        asyncio.run(load_preset_sample(preset_text(sample), scratch))
    except Exception as exc:
        report.add(sample, "loaded", False, f"{type(exc).__name__}: {exc}")
    else:
        report.add(sample, "loaded", detail="preset parsed and loaded")
