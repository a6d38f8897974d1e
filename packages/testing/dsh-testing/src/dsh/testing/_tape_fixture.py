"""The ``tape`` fixture: VCR-style record and replay of a test's model traffic.

``tape("name", openai="https://api.openai.com/v1")`` starts a
:class:`~dsh.tape.TapeProxy` on ``<the test file's folder>/tapes/<name>/``: it replays
by default (no server, no key) and records, through to the upstreams named, when
pytest runs with ``--record-tapes``. Point the model at ``proxy.base_url(label)``;
``DSH_TAPE_PROXY`` is set for the test (child processes, and the codex and
claude-code providers, go through the same tape). A replay whose requests differ
from the tape fails the test with the difference.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from dsh.tape import TAPE_FILE, TapeProxy

__all__ = ["RECORD_OPTION", "TapeFactory", "add_record_option", "tape"]

RECORD_OPTION = "--record-tapes"
"""The pytest option that makes :func:`tape` record instead of replaying."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def add_record_option(parser: pytest.Parser) -> None:
    """Register :data:`RECORD_OPTION`."""
    parser.getgroup("dsh-testing").addoption(
        RECORD_OPTION,
        action="store_true",
        default=False,
        help="tape fixture: record tapes against the real model APIs (default: replay them)",
    )


class TapeFactory:
    """What the ``tape`` fixture gives a test: call it with a tape name (and, for
    recording, the upstreams by label) to get a started proxy."""

    def __init__(self, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
        self.recording: bool = bool(request.config.getoption(RECORD_OPTION))
        """True under ``--record-tapes``: the test should then reach its real (or fake)
        model servers; else nothing needs to run but the proxy."""
        self.folder = Path(request.node.path).parent / "tapes"
        """Where the test's tapes are: ``tapes/`` beside the test file."""
        self.proxies: list[TapeProxy] = []
        self._nodeid = request.node.nodeid
        self._monkeypatch = monkeypatch

    def __call__(self, name: str, **upstreams: str) -> TapeProxy:
        """The started proxy of tape ``name`` (``tapes/<name>/``): recording to
        ``upstreams`` (label = base URL) under ``--record-tapes`` (a tape recorded
        before is replaced), else replaying; ``DSH_TAPE_PROXY`` names it until the
        test ends. A missing tape fails the test and says how to record it."""
        if not _NAME.fullmatch(name):
            raise ValueError(f"a tape name is letters, digits, '.', '_' and '-', not {name!r}")
        directory = self.folder / name
        if self.recording:
            if not upstreams:
                raise ValueError(f"tape({name!r}): recording needs upstreams (label=base_url)")
            if directory.exists():
                shutil.rmtree(directory)
            proxy = TapeProxy(directory, "record", upstreams)
        else:
            if not (directory / TAPE_FILE).is_file():
                pytest.fail(
                    f"no tape {name!r} at {directory}: record it with"
                    f" `pytest {RECORD_OPTION} {self._nodeid}` (with the model's key set and"
                    " its servers reachable), then commit the folder",
                    pytrace=False,
                )
            proxy = TapeProxy(directory, "replay")
        proxy.start()
        self.proxies.append(proxy)
        for variable, value in proxy.env().items():
            self._monkeypatch.setenv(variable, value)
        return proxy

    def close(self) -> None:
        """Close every proxy; the first replay divergence fails the test."""
        divergences = []
        while self.proxies:
            proxy = self.proxies.pop()
            proxy.close()
            if proxy.divergence is not None:
                divergences.append(proxy.divergence.describe())
        if divergences:
            pytest.fail(
                f"{divergences[-1]}\n(re-record with `pytest {RECORD_OPTION} {self._nodeid}`"
                " if the change is intended)",
                pytrace=False,
            )


@pytest.fixture
def tape(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[TapeFactory]:
    """Record (``--record-tapes``) or replay (default) a test's model calls:
    ``proxy = tape("name", openai=base_url)``, then the model at
    ``proxy.base_url("openai")``. See :class:`TapeFactory`."""
    factory = TapeFactory(request, monkeypatch)
    try:
        yield factory
    finally:
        factory.close()
