"""``did you mean "..."?`` for a name that is close to one that exists."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["did_you_mean"]


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``'did you mean "dsh-tool-shell"?'`` for the choice closest to ``word`` (a typo),
    or ``""`` when none is close."""
    found = difflib.get_close_matches(word, sorted(set(choices)), n=1, cutoff=0.6)
    return f'did you mean "{found[0]}"?' if found else ""
