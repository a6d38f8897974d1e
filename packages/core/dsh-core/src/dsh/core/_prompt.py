"""System prompts built from ordered, named sections.

Plugins and drivers set sections per agent (``persona``, ``delegation``,
``tools``, ...), so a child can replace one section without touching the others.
"""

from __future__ import annotations

__all__ = ["SECTION_ORDER", "PromptSections"]

SECTION_ORDER = {"persona": 0, "delegation": 100, "tools": 200}
"""Default positions of the well-known sections; others go after, at 300."""


class PromptSections:
    """An ordered set of named system-prompt sections, rendered lazily and cached."""

    __slots__ = ("_rendered", "_sections", "version")

    def __init__(self, sections: dict[str, tuple[int, str]] | None = None) -> None:
        self._sections: dict[str, tuple[int, str]] = dict(sections) if sections else {}
        self._rendered: str | None = None
        self.version = 0
        """Bumped on every change (lets derived prompts be cached)."""

    def set(self, name: str, text: str, *, order: int | None = None) -> None:
        """Set (or replace) section ``name``."""
        if order is None:
            existing = self._sections.get(name)
            order = existing[0] if existing else SECTION_ORDER.get(name, 300)
        self._sections[name] = (order, text)
        self._rendered = None
        self.version += 1

    def remove(self, name: str) -> None:
        """Remove section ``name`` if present."""
        if self._sections.pop(name, None) is not None:
            self._rendered = None
            self.version += 1

    def get(self, name: str) -> str | None:
        """The text of section ``name``, or None."""
        entry = self._sections.get(name)
        return entry[1] if entry else None

    def names(self) -> list[str]:
        """Section names in render order."""
        return [n for n, _ in sorted(self._sections.items(), key=lambda kv: kv[1][0])]

    def render(self) -> str:
        """The full system prompt: non-empty sections in order, blank-line separated."""
        if self._rendered is None:
            ordered = sorted(self._sections.values(), key=lambda entry: entry[0])
            self._rendered = "\n\n".join(text for _, text in ordered if text)
        return self._rendered

    def copy(self) -> PromptSections:
        """An independent copy."""
        copy = PromptSections(self._sections)
        copy._rendered = self._rendered
        return copy
