"""The ``a2a`` provider passes the provider conformance suite against a real ``dsh a2a``
server on a prompt-keyed scripted model."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from dsh.testing.conformance import ConformanceHarness, ProviderConformance
from dsh.testing.fixtures import keyed_conformance, keyed_preset_file

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, kit_module: Any) -> Iterator[Any]:
    tmp = tmp_path_factory.mktemp("a2a-conformance")
    server = kit_module.start_dsh_a2a(tmp, keyed_preset_file(tmp / "served.toml"))
    try:
        yield server
    finally:
        assert server.stop() == 143
    assert "Traceback" not in server.stderr, server.stderr


class TestA2AProviderWithDshA2A(ProviderConformance):
    """``a2a`` → ``dsh a2a``: "please hang" hangs until cancelled, "please fail" fails."""

    @pytest.fixture
    async def harness(self, rig: Any, served: Any) -> ConformanceHarness:
        name = rig.register(served.url, name="a2a", cancel_grace=3.0, depth_limit=True)
        return keyed_conformance(rig.ctx, name, rig.parent)
