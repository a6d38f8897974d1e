"""Whole test classes for an in-process provider (``spawn``, ``fork``): its conformance
suite with the registration check, and its fault matrix. A provider's test module binds
one to a ``Test*`` name, which pytest collects."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from dsh.core import Context, parse_preset
from dsh.subagent import ALL_START_CAPABILITIES, SubagentRuntime
from dsh.testing.conformance import ConformanceHarness, ProviderConformance
from dsh.testing.faults import Fault, FaultHarness, FaultMatrix

from ._in_process import in_process_conformance, in_process_faults
from ._presets import SCRIPTED_PRESET, plugin_rows

__all__ = ["in_process_conformance_suite", "in_process_fault_matrix"]


def _named(cls: type, provider: str, kind: str) -> None:
    cls.__name__ = cls.__qualname__ = f"Test{provider.capitalize()}{kind}"


def in_process_conformance_suite(
    provider: str, plugin: str, *, inherits_parent_context: bool
) -> type[ProviderConformance]:
    """The conformance suite of the in-process ``provider`` of ``plugin`` (harness:
    :func:`in_process_conformance`), plus ``test_registered_with_all_four_capabilities``:
    loaded through its entry point, the provider has every start capability and
    inherits the parent's context as ``inherits_parent_context`` says. Bind it to a
    ``Test*`` name in the provider's test module::

        TestSpawnConformance = in_process_conformance_suite("spawn", PLUGIN, ...)
    """

    class Suite(ProviderConformance):
        @pytest.fixture
        async def harness(self) -> AsyncIterator[ConformanceHarness]:
            async with in_process_conformance(provider, plugin) as harness:
                yield harness

        @pytest.mark.anyio
        async def test_registered_with_all_four_capabilities(self) -> None:
            async with Context.open(parse_preset(SCRIPTED_PRESET + plugin_rows(plugin))) as ctx:
                registered = SubagentRuntime.of(ctx).get_provider(provider)
                assert registered is not None
                assert registered.capabilities == ALL_START_CAPABILITIES
                assert registered.inherits_parent_context is inherits_parent_context

    _named(Suite, provider, "Conformance")
    return Suite


def in_process_fault_matrix(
    provider: str, plugin: str, *, setup: str, seed_turn: str | None = None
) -> type[FaultMatrix]:
    """The fault matrix of the in-process ``provider`` of ``plugin`` (harness:
    :func:`in_process_faults` with ``setup`` and ``seed_turn``, in the test's
    ``tmp_path``). Bind it to a ``Test*`` name in the provider's test module::

        TestSpawnFaults = in_process_fault_matrix("spawn", PLUGIN, setup=TOOL)
    """

    class Matrix(FaultMatrix):
        @pytest.fixture
        async def fault_harness(self, fault: Fault, tmp_path: Path) -> AsyncIterator[FaultHarness]:
            async with in_process_faults(
                fault, provider, plugin, tmp_path, setup=setup, seed_turn=seed_turn
            ) as harness:
                yield harness

    _named(Matrix, provider, "Faults")
    return Matrix
