"""MkDocs hooks for the dsh site (mkdocs.yml: ``hooks: [tools/docs/hooks.py]``).

Nav globs: A nav entry that is a path with a ``*`` (``providers/*.md``,
``reference/*.md``) expands, when the config is loaded, to the pages it matches that
the nav does not list elsewhere, sorted, ``index.md`` first. So a new provider page
or a new package's reference page joins the site without a nav edit; a page added
anywhere else is not matched by any glob, and the strict build fails on it
(``validation.nav.omitted_files: warn``) until the nav names it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import ConfigurationError


def _paths(item: Any) -> list[str]:
    if isinstance(item, str):
        return [item]
    if isinstance(item, dict):
        return [p for value in item.values() for p in _paths(value)]
    if isinstance(item, list):
        return [p for value in item for p in _paths(value)]
    return []


def _expand(item: Any, docs: Path, listed: set[str]) -> Any:
    if isinstance(item, list):
        out: list[Any] = []
        for value in item:
            expanded = _expand(value, docs, listed)
            out += expanded if isinstance(value, str) and "*" in value else [expanded]
        return out
    if isinstance(item, dict):
        return {key: _expand(value, docs, listed) for key, value in item.items()}
    if isinstance(item, str) and "*" in item:
        found = sorted(
            path.relative_to(docs).as_posix() for path in docs.glob(item) if path.is_file()
        )
        found.sort(key=lambda path: not path.endswith("/index.md"))
        matches = [path for path in found if path not in listed]
        if not matches and not any(path in listed for path in found):
            raise ConfigurationError(f"nav glob {item!r} matches no page in {docs}")
        return matches
    return item


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    if config.nav is None:
        return config
    docs = Path(config.docs_dir)
    listed = {path for path in _paths(config.nav) if "*" not in path}
    config.nav = _expand(config.nav, docs, listed)
    return config
