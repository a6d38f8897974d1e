"""Content rules: answer a request by what it says, not by its place in the script.

A :class:`RuleServer` answers each request to its rule routes with the first
matching rule (:meth:`RuleServer.when`), else the script queue, else ``default``.
A rule's ``match`` is a substring of (or a regex searched in) the request's
prompt text, or a predicate of the request; its replies are picked by *tool
step* (how many tool rounds follow the latest prompt: ``replies[step]``, the
last one repeating), so a rule scripts a whole tool round trip statelessly and
serves any number of runs.

A protocol module subclasses :class:`ContentRule` (where the prompt text is, how
tool steps count) and :class:`RuleServer` (routes, request checks, rendering).
"""

from dsh.testing.model_servers._rules import ContentRule, Matcher, RuleServer

__all__ = ["ContentRule", "Matcher", "RuleServer"]
