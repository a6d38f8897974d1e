"""A Griffe extension (mkdocs.yml: mkdocstrings' ``extensions``) that makes the
docstrings' reST habits read well as Markdown in the API reference, without touching
the sources:

* roles become code: ``:class:`~dsh.subagent.kit.RemoteRun``` reads ``RemoteRun``
  (the last part with ``~``, as Sphinx shows it), ``:func:`source_region``` reads
  ``source_region``;
* a paragraph ending in ``::`` (reST's "a literal block follows") ends in ``:``; the
  indented block after it is already code in Markdown.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(
    r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj|const|ref|term)"
    r":`(?P<tilde>~?)(?P<target>[^`]+)`"
)
LITERAL = re.compile(r"(?m)(\S)\s*::$|^::$")


def _role(match: re.Match[str]) -> str:
    target = match["target"]
    if match["tilde"]:
        target = target.rsplit(".", 1)[-1]
    return f"`{target}`"


def markdown(text: str) -> str:
    text = ROLE.sub(_role, text)
    return LITERAL.sub(lambda m: f"{m[1]}:" if m[1] else "", text)


class SphinxRolesToMarkdown(griffe.Extension):
    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown(obj.docstring.value)
