"""Per-tape normalisation: what legitimately changes between a recording and its replay
(a temporary folder, today's date, a per-run id), rewritten the same way on both sides
so that the comparison of requests does not see it.

:class:`Normalisation` is given to a :class:`~dsh.tape.TapeProxy` (``normalise=``), the
same one when recording and when replaying (the ``tape`` test fixture of dsh-testing
makes one per test). It applies to model exchanges only (a tool call of a dsh agent is
compared as it is).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ISO_DATE", "PRODUCT_PATTERNS", "Normalisation"]

ISO_DATE = (r"\b\d{4}-\d{2}-\d{2}\b", "<DATE>")
"""A pattern for :attr:`Normalisation.patterns`: every ISO date (``2026-12-04``) is
``<DATE>`` (Claude Code and Codex tell the model today's date)."""

PRODUCT_PATTERNS: tuple[tuple[str, str], ...] = (
    ISO_DATE,
    # codex: the header of every exec_command output it sends back to the model
    (r"\bChunk ID: [0-9a-f]+", "Chunk ID: <ID>"),
    (r"\bWall time: [0-9.]+ seconds", "Wall time: <SECONDS> seconds"),
    # codex's <environment_context>: the machine's shell and time zone
    (r"<shell>[^<]*</shell>", "<shell><SHELL></shell>"),
    (r"<timezone>[^<]*</timezone>", "<timezone><TZ></timezone>"),
    # Claude Code's environment section: the machine's shell and kernel
    (r"(?m)^ - Shell: .*$", " - Shell: <SHELL>"),
    (r"(?m)^ - OS Version: .*$", " - OS Version: <OS>"),
)
"""Patterns for what the agent products make up per run, or per machine, inside a
request, found by recording the same test twice: today's date (:data:`ISO_DATE`); the
``Chunk ID`` and ``Wall time`` that Codex puts before each command output it returns
to the model (the output itself, and its exit code, are still compared); the shell,
time zone and kernel version that Codex and Claude Code describe the machine with."""

_ANY = "*"
_MASK = "<VOLATILE>"


@dataclass(frozen=True)
class Normalisation:
    """How a tape's requests are rewritten before they are written (recording) and
    before they are matched (replaying); the model's answers get the reverse of
    :attr:`values`.

    - ``values``: placeholder -> this run's text, e.g. ``{"<TMP>": "/tmp/pytest-3/t0"}``.
      Recording, every occurrence of the text in a request and in its answer is
      written as the placeholder; replaying, the request is rewritten the same way
      before it is matched, and the placeholder in the recorded answer is replaced by
      this run's text (so a tool call the model makes on a path names this run's).
      Longer texts are replaced first; an empty text is ignored.
    - ``patterns``: ``(regex, replacement)`` pairs applied, in order, to every string of
      a request (one way: answers are left alone), e.g. :data:`ISO_DATE`.
    - ``fields``: paths into the JSON body (``*`` for every item of a list) whose
      value is replaced by ``"<VOLATILE>"`` on both sides, for what this tape's client
      makes up per run beyond :data:`dsh.tape.VOLATILE_FIELDS`.

    A real change of a request (another prompt, another tool result) is not covered
    by any of these, and still diverges.
    """

    values: Mapping[str, str] = field(default_factory=dict)
    patterns: Sequence[tuple[str, str]] = ()
    fields: Sequence[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        for pattern, _ in self.patterns:
            re.compile(pattern)  # a bad pattern fails here, not mid-replay

    def request(self, value: Any) -> Any:
        """A copy of a request body (its JSON value, or its text) as the tape holds it."""
        value = _strings(value, self._rewrite)
        for path in self.fields:
            _mask(value, path)
        return value

    def recorded_answer(self, text: str) -> str:
        """An answer's body as it is written on the tape (this run's texts -> placeholders)."""
        for placeholder, actual in self._pairs():
            text = text.replace(actual, placeholder)
        return text

    def replayed_answer(self, text: str) -> str:
        """A recorded answer's body as it is given back (placeholders -> this run's texts)."""
        for placeholder, actual in self._pairs():
            text = text.replace(placeholder, actual)
        return text

    def _pairs(self) -> list[tuple[str, str]]:
        pairs = [(p, a) for p, a in self.values.items() if a]
        return sorted(pairs, key=lambda pair: len(pair[1]), reverse=True)

    def _rewrite(self, text: str) -> str:
        text = self.recorded_answer(text)
        for pattern, replacement in self.patterns:
            text = re.sub(pattern, replacement, text)
        return text


def _strings(value: Any, rewrite: Any) -> Any:
    if isinstance(value, str):
        return rewrite(value)
    if isinstance(value, dict):
        return {k: _strings(v, rewrite) for k, v in value.items()}
    if isinstance(value, list):
        return [_strings(item, rewrite) for item in value]
    return value


def _mask(node: Any, path: Sequence[str]) -> None:
    name, rest = path[0], path[1:]
    if name == _ANY:
        if isinstance(node, list):
            for index, item in enumerate(node):
                if rest:
                    _mask(item, rest)
                else:
                    node[index] = _MASK
    elif isinstance(node, dict) and name in node:
        if rest:
            _mask(node[name], rest)
        else:
            node[name] = _MASK


def normalised(normalise: Normalisation | None, value: Any) -> Any:
    """``normalise.request(value)``, or ``value`` when there is no normalisation."""
    return value if normalise is None else normalise.request(value)


def answer_to_tape(normalise: Normalisation | None, text: str) -> str:
    """An answer's body as it is written on the tape (unchanged without a normalisation)."""
    return text if normalise is None else normalise.recorded_answer(text)


def answer_from_tape(normalise: Normalisation | None, text: str) -> str:
    """A recorded answer's body as it is given back (unchanged without a normalisation)."""
    return text if normalise is None else normalise.replayed_answer(text)
