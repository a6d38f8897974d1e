"""The code behind :mod:`dsh.testing.model_servers.rules` (its docstring says what it is)."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from dsh.testing.model_servers._http import Exchange, RecordedRequest
from dsh.testing.model_servers._server import FakeServer

__all__ = ["ContentRule", "Matcher", "RuleServer"]

Matcher = str | re.Pattern[str] | Callable[[RecordedRequest], bool]
"""A substring of the prompt text, a regex searched in it, or a predicate of the request."""


@dataclass(frozen=True, slots=True)
class ContentRule(ABC):
    """Answer requests matching ``match`` with ``replies`` (picked by tool step).

    Subclasses say where the prompt text is (:meth:`prompt_text`) and how tool
    steps count (:meth:`tool_step`).
    """

    match: Matcher
    replies: tuple[Any, ...]

    def __post_init__(self) -> None:
        if not self.replies:
            raise ValueError("a rule needs at least one reply")

    @abstractmethod
    def prompt_text(self, request: RecordedRequest) -> str:
        """The text a ``str`` or regex ``match`` is searched in."""

    @abstractmethod
    def tool_step(self, request: RecordedRequest) -> int:
        """How many tool rounds follow the latest prompt (0 for a fresh prompt)."""

    def matches(self, request: RecordedRequest) -> bool:
        """Does this rule answer ``request``?"""
        if isinstance(self.match, str):
            return self.match in self.prompt_text(request)
        if isinstance(self.match, re.Pattern):
            return self.match.search(self.prompt_text(request)) is not None
        return bool(self.match(request))

    def reply_for(self, request: RecordedRequest) -> Any:
        """``replies[tool_step(request)]``, the last reply repeating."""
        return self.replies[min(self.tool_step(request), len(self.replies) - 1)]


RuleT = TypeVar("RuleT", bound=ContentRule)


class RuleServer(FakeServer, Generic[RuleT]):
    """A :class:`FakeServer` whose ``POST`` routes ``paths`` answer by rules first.

    Each request to ``paths`` is first offered to :meth:`reject` (the real API's
    refusals: authentication, malformed requests), then to the rules in order,
    then to the script queue. ``rule_type`` is the protocol's rule class.
    """

    def __init__(
        self,
        *script: Any,
        default: Any = None,
        rules: Sequence[RuleT] = (),
        rule_type: type[RuleT],
        paths: Sequence[str],
    ) -> None:
        super().__init__(*script, default=default)
        self.rules: list[RuleT] = list(rules)
        """Checked in order before the script queue."""
        self._rule_type = rule_type
        self._rule_paths = frozenset(paths)
        for path in paths:
            self.route("POST", path, self._answer)

    def when(self, match: Matcher, *replies: Any) -> RuleT:
        """Add a rule: requests matching ``match`` get ``replies`` (by tool step)."""
        rule = self._rule_type(match, tuple(replies))
        self.rules.append(rule)
        return rule

    def matching(self, match: Matcher) -> list[RecordedRequest]:
        """Logged requests to the rule routes that ``match`` (as a rule would)."""
        probe = self._rule_type(match, (None,))
        return [r for r in self.requests if r.url_path in self._rule_paths and probe.matches(r)]

    def reject(self, request: RecordedRequest) -> tuple[int, Any] | None:
        """``(status, JSON body)`` for a request the real API refuses; None to answer it.

        The base refuses nothing; protocol subclasses check keys and request shapes.
        """
        return None

    async def _answer(self, exchange: Exchange) -> None:
        request = exchange.request
        refusal = self.reject(request)
        if refusal is not None:
            await exchange.send_json(*refusal)
            return
        for rule in list(self.rules):
            if rule.matches(request):
                await self.perform(rule.reply_for(request), exchange)
                return
        await self.respond_scripted(exchange)
