"""Where the project lives: the one setting for its public addresses, and its rules.

REPOSITORY and DOCUMENTATION below are the only place a public address of dsh is
written. While they are None (the project has no home of its own yet), nothing may
point anywhere:

* no package declares ``[project.urls]``;
* a package README names a file of the repository as code text (``docs/tools.md``),
  never as a link: a relative link breaks on a package index, and an absolute one
  would point at an address the project does not control.

Once they are set, every package's ``[project.urls]`` is derived from them
(Homepage, Documentation, Repository, Issues) and every README reference to a file
of the repository is a link under REPOSITORY on ``main``. To move in, set them and
run ``tools/check_workspace.py --fix``: it writes the tables and rewrites links into
this repository that use another base (it does not turn code text into links; the
check then names each one). With the setting unset, ``--fix`` removes the tables
and turns links into this repository into code text.

tools/check_workspace.py applies these rules to every package;
``tools/check_workspace.py --self-test`` checks the rules themselves.
"""

from __future__ import annotations

import re
import tempfile
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The one setting. None: no public address yet (see the module docstring).
REPOSITORY: str | None = None
DOCUMENTATION: str | None = None


@dataclass(frozen=True)
class Home:
    """The public addresses the rules derive from (None: none yet)."""

    repository: str | None = None
    documentation: str | None = None


HOME = Home(REPOSITORY, DOCUMENTATION)

# Top-level folders of the repository: a README path starting with one of these
# only resolves in a checkout, not on a package index.
REPO_FOLDERS = ("docs", "tools", "packages", "tests-integration", ".ci")
_WHERE = "REPOSITORY and DOCUMENTATION in tools/project_home.py"


def project_urls(home: Home = HOME) -> dict[str, str]:
    """The ``[project.urls]`` every package declares; empty: no table at all."""
    urls: dict[str, str] = {}
    if home.repository or home.documentation:
        urls["Homepage"] = home.repository or home.documentation or ""
    if home.documentation:
        urls["Documentation"] = home.documentation
    if home.repository:
        urls["Repository"] = home.repository
        urls["Issues"] = f"{home.repository}/issues"
    return urls


def check_project_urls(project: dict[str, Any], where: str, home: Home = HOME) -> list[str]:
    """Problems with one pyproject's ``[project.urls]`` (``where``: its path)."""
    expected = project_urls(home)
    if not expected:
        if "urls" in project:
            return [
                f"{where}: remove [project.urls]: the project has no public address yet "
                f"({_WHERE} are None); --fix removes it"
            ]
        return []
    urls = project.get("urls", {})
    return [
        f'{where}: [project.urls] {key} must be "{url}" (found {urls.get(key)!r}); '
        "--fix rewrites it"
        for key, url in expected.items()
        if urls.get(key) != url
    ]


# --- README links ---------------------------------------------------------------------

_INLINE_LINK = re.compile(
    r"!?\[(?P<text>(?:[^\[\]]|\[[^\]]*\])*)\]\(\s*<?(?P<target>[^)\s>]*)>?(?:\s+[\"'][^)]*[\"'])?\s*\)"
)
_REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(?P<target>\S+?)>?(?:\s+.*)?$", re.MULTILINE)
_HTML_LINK = re.compile(r"\b(?:href|src)\s*=\s*[\"'](?P<target>[^\"']*)[\"']", re.IGNORECASE)
# A link to a file on GitHub; the characters after it that end a Markdown or HTML link
# are not part of the path.
_GITHUB_FILE = re.compile(
    r"(?P<base>https://github\.com/[^/\s]+/[^/\s#?]+)/(?P<kind>blob|tree|raw)/"
    r"(?P<ref>[^/\s]+)/(?P<path>[^\s#?()<>\[\]\"']*)"
)
_BARE_PATH = re.compile(
    r"(?<![\w./@-])(?:\.\.?/)*(?:" + "|".join(re.escape(f) for f in REPO_FOLDERS) + r")/[\w./-]*"
)


def readme_links(text: str) -> Iterator[tuple[int, str]]:
    """(line, target) of every Markdown, reference and HTML link in ``text``."""
    for pattern in (_INLINE_LINK, _REFERENCE_LINK, _HTML_LINK):
        for match in pattern.finditer(text):
            yield text.count("\n", 0, match.start()) + 1, match["target"]


def check_link(target: str, root: Path, home: Home = HOME) -> str | None:
    """Why ``target`` breaks or leaves the one URL base, or None."""
    if not target or target.startswith(("#", "mailto:")):
        return None
    if not re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
        if home.repository is None:
            return (
                f"relative link {target!r} only resolves in the repository, and the project "
                "has no public address yet: name the file as code text, not a link"
            )
        return (
            f"relative link {target!r} only resolves in the repository; "
            f"use {home.repository}/blob/main/<path>"
        )
    match = _GITHUB_FILE.match(target)
    if match is None:
        return None
    if _through_another_base(match, root, home):
        if home.repository is None:
            return (
                f"link {target!r} points at this repository through {match['base']}, an address "
                f"the project does not control ({_WHERE} are None): name the file as code text"
            )
        return (
            f"link {target!r} points at this repository through another base; use {home.repository}"
        )
    if match["base"] != home.repository:
        return None  # another project's file
    if match["ref"] != "main":
        return f"link {target!r} should point at main"
    path = match["path"].rstrip("/")
    if not path or not (root / path).exists():
        return f"link {target!r}: {path or '(nothing)'} does not exist in the repository"
    return None


def _through_another_base(match: re.Match[str], root: Path, home: Home) -> bool:
    """A GitHub file link to one of this repository's files with a base other than the
    repository's (what is left after the base moved, or a base the project never had)."""
    path = match["path"].rstrip("/")
    return (
        match["base"] != home.repository
        and path.split("/", 1)[0] in REPO_FOLDERS
        and (root / path).exists()
    )


def check_readme(readme: Path, root: Path, home: Home = HOME) -> list[str]:
    """Problems with the links and repository paths of one package README."""
    where = readme.relative_to(root)
    text = readme.read_text()
    problems = [
        f"{where}:{line}: {reason}"
        for line, target in readme_links(text)
        if (reason := check_link(target, root, home)) is not None
    ]
    if home.repository is None:
        return problems  # code text is the only way to name a file
    # Paths into the repository outside a link (prose or code) do not resolve on an index.
    without_links = _INLINE_LINK.sub(
        lambda m: " " * len(m[0].replace("\n", "")) + "\n" * m[0].count("\n"), text
    )
    without_urls = re.sub(r"[a-z][a-z0-9+.-]*://\S+", lambda m: " " * len(m[0]), without_links)
    for match in _BARE_PATH.finditer(without_urls):
        path = re.sub(r"^(?:\.\.?/)+", "", match[0]).rstrip(".")
        # A file of the repository, or a name that looks like one (not prose like "a/b").
        if not ((root / path).exists() or re.search(r"\.[A-Za-z]+$", path)):
            continue
        line = without_urls.count("\n", 0, match.start()) + 1
        problems.append(
            f"{where}:{line}: {path!r} is a repository path; "
            f"link it as [{path}]({home.repository}/blob/main/{path})"
        )
    return problems


# --- fix: move the URL base -----------------------------------------------------------

_URLS_TABLE = re.compile(r"^\[project\.urls\]\n(?:(?!\[)[^\n]*\n)*?(?=\n*(?:\[|\Z))", re.MULTILINE)


def fix_package(folder: Path, root: Path, home: Home = HOME) -> list[str]:
    """Rewrite one package's ``[project.urls]`` and its README links into this
    repository to follow ``home``; the files it changed (relative to ``root``)."""
    changed: list[str] = []
    urls = project_urls(home)
    block = "[project.urls]\n" + "".join(f'{k} = "{v}"\n' for k, v in urls.items())
    pyproject = folder / "pyproject.toml"
    text = pyproject.read_text()
    match = _URLS_TABLE.search(text)
    if match is not None and not urls:
        new = text[: match.start()] + re.sub(r"^\n+", "", text[match.end() :])
    elif match is not None:
        new = text[: match.start()] + block + text[match.end() :]
    elif urls and (header := re.search(r"^\[project\]\n", text, re.MULTILINE)):
        following = re.search(r"^\[", text[header.end() :], re.MULTILINE)
        at = header.end() + following.start() if following else len(text)
        new = text[:at] + block + "\n" + text[at:]
    else:
        new = text
    if new != text:
        pyproject.write_text(new)
        changed.append(str(pyproject.relative_to(root)))
    readme = folder / "README.md"
    if readme.is_file():
        text = readme.read_text()
        new = _rebase_readme(text, root, home)
        if new != text:
            readme.write_text(new)
            changed.append(str(readme.relative_to(root)))
    return changed


def _rebase_readme(text: str, root: Path, home: Home) -> str:
    def rebase(match: re.Match[str]) -> str:
        if _through_another_base(match, root, home):
            if home.repository is None:
                return f"`{match['path'].rstrip('/')}`"
            return f"{home.repository}/{match['kind']}/main/{match['path']}"
        return match[0]

    def unlink(link: re.Match[str]) -> str:
        match = _GITHUB_FILE.fullmatch(link["target"])
        if match is None or not _through_another_base(match, root, home):
            return link[0]
        path = match["path"].rstrip("/")
        words = link["text"].strip()
        return f"`{path}`" if words.strip("`") == path else f"{words} (`{path}`)"

    if home.repository is None:
        text = _INLINE_LINK.sub(unlink, text)
    return _GITHUB_FILE.sub(rebase, text)


# --- self-test ------------------------------------------------------------------------

_PYPROJECT = '[project]\nname = "dsh-x"\n\n{urls}[tool.x]\ny = 1\n'
_ELSEWHERE = "https://github.com/someone/dsh"
_SELF_TEST_HOME = Home("https://github.com/example/dsh", "https://example.org/dsh/")
_FULL_URLS = "".join(f'{k} = "{v}"\n' for k, v in project_urls(_SELF_TEST_HOME).items())
# (home, README text, how many problems the README check must report)
_README_CASES: list[tuple[Home, str, int]] = [
    (Home(), "See `docs/a.md` in the dsh repository.\n", 0),
    (Home(), "See [docs/a.md](docs/a.md).\n", 1),
    (Home(), f"See [a]({_ELSEWHERE}/blob/main/docs/a.md).\n", 1),
    (Home(), f"Their [guide]({_ELSEWHERE}/blob/main/guide/intro.md), [#](#x).\n", 0),
    (_SELF_TEST_HOME, "See `docs/a.md`.\n", 1),
    (_SELF_TEST_HOME, "See [docs/a.md](docs/a.md).\n", 1),
    (_SELF_TEST_HOME, f"See [a]({_ELSEWHERE}/blob/main/docs/a.md).\n", 1),
    (_SELF_TEST_HOME, "See [a](https://github.com/example/dsh/blob/main/docs/a.md).\n", 0),
    (_SELF_TEST_HOME, "See [a](https://github.com/example/dsh/blob/main/docs/gone.md).\n", 1),
]


def self_test() -> list[str]:
    """Check the rules on a throwaway workspace; the failures (empty: all pass)."""
    failures: list[str] = []
    for home, urls, expected in [
        (Home(), "", 0),
        (Home(), f"[project.urls]\n{_FULL_URLS}\n", 1),
        (_SELF_TEST_HOME, "", len(project_urls(_SELF_TEST_HOME))),
        (_SELF_TEST_HOME, f"[project.urls]\n{_FULL_URLS}\n", 0),
    ]:
        project = tomllib.loads(_PYPROJECT.format(urls=urls))["project"]
        found = check_project_urls(project, "pyproject.toml", home)
        if len(found) != expected:
            failures.append(f"[project.urls] {urls!r} under {home}: expected {expected}, {found}")
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        (root / "docs").mkdir()
        (root / "docs" / "a.md").write_text("# a\n")
        folder = root / "packages" / "g" / "dsh-x"
        folder.mkdir(parents=True)
        readme = folder / "README.md"
        for home, text, expected in _README_CASES:
            readme.write_text(text)
            found = check_readme(readme, root, home)
            if len(found) != expected:
                failures.append(f"README {text!r} under {home}: expected {expected}, {found}")
        # --fix, both ways: each leaves the package clean.
        pyproject = folder / "pyproject.toml"
        for home, urls, text in [
            (Home(), f"[project.urls]\n{_FULL_URLS}\n", f"[a]({_ELSEWHERE}/blob/main/docs/a.md)"),
            (_SELF_TEST_HOME, "", f"[a]({_ELSEWHERE}/blob/main/docs/a.md)"),
        ]:
            pyproject.write_text(_PYPROJECT.format(urls=urls))
            readme.write_text(text + "\n")
            fix_package(folder, root, home)
            project = tomllib.loads(pyproject.read_text())["project"]
            left = check_project_urls(project, "pyproject.toml", home)
            left += check_readme(readme, root, home)
            if left or "[tool.x]" not in pyproject.read_text():
                failures.append(f"--fix under {home} left {left} in\n{pyproject.read_text()}")
    return failures
