"""The ``tape`` fixture: VCR-style record and replay of a test's model traffic.

``tape("name", openai="https://api.openai.com/v1")`` starts a
:class:`~dsh.tape.TapeProxy` on ``<the test file's folder>/tapes/<name>/``: it replays
by default (no server, no key) and records, through to the upstreams named, when
pytest runs with ``--record-tapes``. Point the model at ``proxy.base_url(label)``;
``DSH_TAPE_PROXY`` is set for the test (child processes, and the codex and
claude-code providers, go through the same tape). A replay whose requests differ
from the tape fails the test with the difference.

What changes legitimately between the recording and a replay is normalised
(:class:`~dsh.tape.Normalisation`): by default the test's ``tmp_path`` (``<TMP>`` on
the tape, this run's folder in the answers) and :data:`~dsh.tape.PRODUCT_PATTERNS`
(ISO dates as ``<DATE>``, Codex's per-run command headers); a test passes
``normalise=`` for more.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from dsh.tape import PRODUCT_PATTERNS, TAPE_FILE, Normalisation, TapeProxy

__all__ = [
    "RECORD_OPTION",
    "TMP_KEY_PLACEHOLDER",
    "TMP_PLACEHOLDER",
    "TapeFactory",
    "add_record_option",
    "tape",
]

RECORD_OPTION = "--record-tapes"
"""The pytest option that makes :func:`tape` record instead of replaying."""

TMP_PLACEHOLDER = "<TMP>"
"""What the test's ``tmp_path`` is written as on a tape (the default normalisation)."""

TMP_KEY_PLACEHOLDER = "<TMP_KEY>"
"""What the test's ``tmp_path`` with every character but letters and digits as ``-`` is
written as on a tape: Claude Code names a folder after its working directory so
(``~/.claude/projects/-tmp-pytest-of-root-...-work/``) and tells the model its path."""

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
        self._request = request

    def normalisation(self, **values: str) -> Normalisation:
        """The default normalisation: the test's ``tmp_path`` as ``<TMP>`` (and as
        :data:`TMP_KEY_PLACEHOLDER` in Claude Code's form),
        :data:`~dsh.tape.PRODUCT_PATTERNS` (dates as ``<DATE>``, Codex's per-run
        command headers), and ``values`` (placeholder = this run's text) besides."""
        tmp = str(self._request.getfixturevalue("tmp_path"))
        defaults = {TMP_PLACEHOLDER: tmp, TMP_KEY_PLACEHOLDER: re.sub("[^A-Za-z0-9]", "-", tmp)}
        return Normalisation({**defaults, **values}, PRODUCT_PATTERNS)

    def __call__(
        self, name: str, *, normalise: Normalisation | None = None, **upstreams: str
    ) -> TapeProxy:
        """The started proxy of tape ``name`` (``tapes/<name>/``): recording to
        ``upstreams`` (label = base URL) under ``--record-tapes`` (a tape recorded
        before is replaced), else replaying; ``DSH_TAPE_PROXY`` names it until the
        test ends. A missing tape fails the test and says how to record it.
        ``normalise`` replaces :meth:`normalisation` (the same one must be given when
        recording and replaying)."""
        normalise = normalise if normalise is not None else self.normalisation()
        if not _NAME.fullmatch(name):
            raise ValueError(f"a tape name is letters, digits, '.', '_' and '-', not {name!r}")
        directory = self.folder / name
        if self.recording:
            if not upstreams:
                raise ValueError(f"tape({name!r}): recording needs upstreams (label=base_url)")
            if directory.exists():
                shutil.rmtree(directory)
            proxy = TapeProxy(directory, "record", upstreams, normalise=normalise)
        else:
            if not (directory / TAPE_FILE).is_file():
                pytest.fail(
                    f"no tape {name!r} at {directory}: record it with"
                    f" `pytest {RECORD_OPTION} {self._nodeid}` (with the model's key set and"
                    " its servers reachable), then commit the folder",
                    pytrace=False,
                )
            proxy = TapeProxy(directory, "replay", normalise=normalise)
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
