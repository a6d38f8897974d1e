"""Check the workspace's hand-kept lists and every package's publishing metadata.

The distributions are the folders ``packages/<group>/<dist>/``, named by their
pyproject ``name``; everything below is checked against that list.

* The root pyproject's ``[project].dependencies`` and ``[tool.uv.sources]`` name
  exactly those distributions (the sources as ``{ workspace = true }``).
* Every package: its folder is named after its distribution; a ``README.md`` (its
  ``readme``) without links or paths that only resolve inside the repository;
  ``src/dsh/<import_name>/py.typed`` by the naming rule (``dsh-a-b-c`` imports as
  ``dsh.a_b_c``) and nothing else under ``src/dsh`` (no ``src/dsh/__init__.py``:
  ``dsh`` is a PEP 420 namespace); a ``tests/`` folder; a wheel built from
  ``src/dsh`` by hatchling new enough for ``license-files``.
* Metadata: ``license = "MIT"`` with ``license-files = ["LICENSE"]`` and a
  ``LICENSE`` identical to the root one (hatchling cannot ship files from outside
  the project folder, so each package keeps a copy); the authors; the required
  classifiers and no ``License ::`` classifier (the SPDX ``license`` replaces
  them); keywords; ``[project.urls]`` derived from the one URL base below.
* Every runtime dependency on a sibling (``dependencies`` and extras; dev groups
  are free) is bounded to the sibling's minor series, e.g. ``dsh-core>=0.1,<0.2``,
  and every sibling a package names has a ``{ workspace = true }`` source.
* A ``dsh.plugins`` entry-point group has one entry, named after the distribution
  and pointing into the package (dsh-testing, which declares several test
  plugins, is checked by MULTI_PLUGIN_PACKAGES instead); every entry point and
  script names a module that exists under ``src/``.

The public URLs are defined here and nowhere else: REPOSITORY and DOCUMENTATION.
To move them, change these two constants and run with ``--fix``, which rewrites
every package's ``[project.urls]`` and the README links into this repository.

    uv run --frozen python tools/check_workspace.py [--fix]
"""

from __future__ import annotations

import re
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The one URL base. Every package's [project.urls] and every README link into the
# repository are derived from these two values.
REPOSITORY = "https://github.com/dsh-dev/dsh"
DOCUMENTATION = "https://dsh-dev.github.io/dsh/"


def project_urls() -> dict[str, str]:
    return {
        "Homepage": REPOSITORY,
        "Documentation": DOCUMENTATION,
        "Repository": REPOSITORY,
        "Issues": f"{REPOSITORY}/issues",
    }


AUTHORS = [{"name": "the dsh authors"}]
LICENSE = "MIT"
LICENSE_FILES = ["LICENSE"]
REQUIRED_CLASSIFIERS = {
    "Development Status :: 3 - Alpha",
    "Framework :: AsyncIO",
    "Intended Audience :: Developers",
    "Operating System :: MacOS",
    "Operating System :: POSIX :: Linux",
    "Programming Language :: Python :: 3 :: Only",
    "Programming Language :: Python :: 3.11",
    "Programming Language :: Python :: 3.12",
    "Programming Language :: Python :: 3.13",
    "Topic :: Software Development :: Libraries",
    "Typing :: Typed",
}
# hatchling reads `license-files` as a PEP 639 list of globs from 1.27 on.
MIN_HATCHLING = (1, 27)
PLUGIN_GROUP = "dsh.plugins"
# Distributions that declare several dsh.plugins entries instead of one named after
# themselves: dsh-testing ships test plugins (example, scripted provider, keyed
# model), each named `dsh-testing-<what>`.
MULTI_PLUGIN_PACKAGES = {"dsh-testing"}
# Top-level folders of the repository: a README path starting with one of these
# only resolves in a checkout, not on a package index.
REPO_FOLDERS = ("docs", "tools", "packages", "tests-integration", ".ci")

ROOT = Path(__file__).resolve().parents[1]

_REQUIREMENT = re.compile(
    r"^\s*(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*"
    r"(?:\[(?P<extras>[^\]]*)\])?\s*(?P<specifier>[^;]*?)\s*(?:;(?P<marker>.*))?$"
)


def normalize(name: str) -> str:
    """PEP 503 normalized distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_requirement(requirement: str) -> tuple[str, str]:
    """(normalized name, version specifier) of a PEP 508 requirement string."""
    match = _REQUIREMENT.match(requirement)
    if match is None:
        raise ValueError(f"cannot parse requirement {requirement!r}")
    return normalize(match["name"]), match["specifier"].replace(" ", "")


def import_name(distribution: str) -> str:
    """The naming rule: distribution dsh-a-b-c imports as dsh.a_b_c (returns a_b_c)."""
    return distribution.removeprefix("dsh-").replace("-", "_")


def distribution_of(module: str) -> str | None:
    """The distribution a dsh.* module belongs to by the naming rule, or None."""
    parts = module.split(".")
    if len(parts) < 2 or parts[0] != "dsh" or not parts[1]:
        return None
    return "dsh-" + parts[1].replace("_", "-")


@dataclass(frozen=True)
class Package:
    name: str
    path: Path
    pyproject: dict[str, Any]

    @property
    def import_name(self) -> str:
        return import_name(self.name)

    @property
    def module(self) -> str:
        return f"dsh.{self.import_name}"

    @property
    def project(self) -> dict[str, Any]:
        project: dict[str, Any] = self.pyproject.get("project", {})
        return project

    def runtime_requirements(self) -> Iterator[tuple[str, str | None]]:
        """(requirement, extra) for `dependencies` (extra None) and every extra."""
        for requirement in self.project.get("dependencies", []):
            yield requirement, None
        for extra, requirements in self.project.get("optional-dependencies", {}).items():
            for requirement in requirements:
                yield requirement, extra

    def runtime_dependencies(self) -> set[str]:
        """Normalized names of every runtime dependency (extras included, dev excluded)."""
        return {parse_requirement(r)[0] for r, _ in self.runtime_requirements()}

    def dev_dependencies(self) -> set[str]:
        names: set[str] = set()
        for group in self.pyproject.get("dependency-groups", {}).values():
            for item in group:
                if isinstance(item, str):  # {include-group = ...} tables name no package
                    names.add(parse_requirement(item)[0])
        return names


def discover(root: Path = ROOT) -> tuple[list[Package], list[str]]:
    """The packages under packages/*/*, and the folders there that are not one."""
    packages: list[Package] = []
    problems: list[str] = []
    for folder in sorted(p for p in root.glob("packages/*/*") if p.is_dir()):
        rel = folder.relative_to(root)
        pyproject = folder / "pyproject.toml"
        if not pyproject.is_file():
            problems.append(
                f"{rel}: no pyproject.toml (every folder packages/<group>/<dist>/ is a package)"
            )
            continue
        try:
            data = tomllib.loads(pyproject.read_text())
        except tomllib.TOMLDecodeError as error:
            problems.append(f"{rel}/pyproject.toml: not valid TOML: {error}")
            continue
        name = data.get("project", {}).get("name")
        if not isinstance(name, str):
            problems.append(f"{rel}/pyproject.toml: no [project].name")
            continue
        packages.append(Package(normalize(name), folder, data))
    return packages, problems


def minor_bound(version: str) -> str:
    """The bound a sibling is required at: >=X.Y,<X.(Y+1) below 1.0, >=X.Y,<(X+1) after."""
    parts = [int(p) for p in re.findall(r"\d+", version)[:2]] + [0]
    major, minor = parts[0], parts[1]
    upper = f"{major}.{minor + 1}" if major == 0 else f"{major + 1}"
    return f">={major}.{minor},<{upper}"


# --- root pyproject ---------------------------------------------------------------


def check_root(root_pyproject: dict[str, Any], names: set[str]) -> list[str]:
    problems: list[str] = []
    where = "pyproject.toml"
    listed = [
        parse_requirement(r)[0] for r in root_pyproject.get("project", {}).get("dependencies", [])
    ]
    for name in sorted({n for n in listed if listed.count(n) > 1}):
        problems.append(f"{where}: [project].dependencies lists {name} more than once")
    for name in sorted(names - set(listed)):
        problems.append(f"{where}: [project].dependencies is missing the workspace package {name}")
    for name in sorted(set(listed) - names):
        problems.append(
            f"{where}: [project].dependencies names {name}, which is not a package under "
            "packages/*/* (development tools belong in [dependency-groups])"
        )
    sources = {
        normalize(k): v
        for k, v in root_pyproject.get("tool", {}).get("uv", {}).get("sources", {}).items()
    }
    for name in sorted(names - set(sources)):
        problems.append(f"{where}: [tool.uv.sources] is missing {name} = {{ workspace = true }}")
    for name in sorted(set(sources) - names):
        problems.append(
            f"{where}: [tool.uv.sources] names {name}, which is not a package under packages/*/*"
        )
    for name in sorted(names & set(sources)):
        if sources[name] != {"workspace": True}:
            problems.append(
                f"{where}: [tool.uv.sources] {name} must be {{ workspace = true }}, "
                f"not {sources[name]}"
            )
    return problems


# --- one package ----------------------------------------------------------------------


def check_layout(package: Package, root: Path) -> list[str]:
    problems: list[str] = []
    rel = package.path.relative_to(root)
    if package.path.name != package.name:
        problems.append(f"{rel}: folder is not named after its distribution {package.name}")
    if not package.name.startswith("dsh-"):
        problems.append(f"{rel}: distribution {package.name} is not named dsh-*")
    if not (package.path / "README.md").is_file():
        problems.append(f"{rel}: no README.md")
    if package.project.get("readme") != "README.md":
        problems.append(f'{rel}/pyproject.toml: readme must be "README.md"')
    namespace = package.path / "src" / "dsh"
    if (namespace / "__init__.py").exists():
        problems.append(
            f"{rel}/src/dsh/__init__.py exists: dsh is a PEP 420 namespace package, remove it"
        )
    if not (namespace / package.import_name / "py.typed").is_file():
        problems.append(
            f"{rel}: no src/dsh/{package.import_name}/py.typed (import name by the naming rule)"
        )
    if namespace.is_dir():
        for entry in sorted(namespace.iterdir()):
            if entry.name not in {package.import_name, "__init__.py", "__pycache__"}:
                problems.append(
                    f"{rel}/src/dsh/{entry.name}: only dsh.{package.import_name} "
                    f"belongs to {package.name}"
                )
    if not (package.path / "tests").is_dir():
        problems.append(f"{rel}: no tests/ folder")
    build = package.pyproject.get("build-system", {})
    if build.get("build-backend") != "hatchling.build":
        problems.append(f'{rel}/pyproject.toml: build-backend must be "hatchling.build"')
    hatchling = [r for r in build.get("requires", []) if parse_requirement(r)[0] == "hatchling"]
    lower = re.search(r">=\s*(\d+)\.(\d+)", hatchling[0]) if hatchling else None
    if lower is None or (int(lower[1]), int(lower[2])) < MIN_HATCHLING:
        problems.append(
            f"{rel}/pyproject.toml: build-system requires must bound hatchling>="
            f"{'.'.join(map(str, MIN_HATCHLING))} (license-files as a list)"
        )
    wheel = (
        package.pyproject.get("tool", {})
        .get("hatch", {})
        .get("build", {})
        .get("targets", {})
        .get("wheel", {})
    )
    if wheel.get("packages") != ["src/dsh"]:
        problems.append(
            f'{rel}/pyproject.toml: [tool.hatch.build.targets.wheel] packages must be ["src/dsh"]'
        )
    return problems


def check_metadata(package: Package, root: Path, root_license: bytes | None) -> list[str]:
    problems: list[str] = []
    where = f"{package.path.relative_to(root)}/pyproject.toml"
    project = package.project
    if project.get("license") != LICENSE:
        problems.append(f'{where}: license must be "{LICENSE}" (an SPDX expression)')
    if project.get("license-files") != LICENSE_FILES:
        problems.append(
            f"{where}: license-files must be {LICENSE_FILES} "
            "(puts LICENSE in the wheel and the sdist)"
        )
    license_copy = package.path / "LICENSE"
    if not license_copy.is_file():
        problems.append(f"{package.path.relative_to(root)}: no LICENSE (copy the root LICENSE)")
    elif root_license is not None and license_copy.read_bytes() != root_license:
        problems.append(
            f"{package.path.relative_to(root)}/LICENSE differs from the root LICENSE (copy it)"
        )
    if project.get("authors") != AUTHORS:
        problems.append(f"{where}: authors must be {AUTHORS}")
    classifiers = project.get("classifiers", [])
    for missing in sorted(REQUIRED_CLASSIFIERS - set(classifiers)):
        problems.append(f'{where}: classifiers is missing "{missing}"')
    for duplicate in sorted({c for c in classifiers if classifiers.count(c) > 1}):
        problems.append(f'{where}: classifiers lists "{duplicate}" more than once')
    for legacy in sorted(c for c in classifiers if c.startswith("License ::")):
        problems.append(f'{where}: "{legacy}": no License classifier next to the SPDX license')
    keywords = project.get("keywords")
    if not keywords or not all(isinstance(k, str) and k.strip() for k in keywords):
        problems.append(f"{where}: keywords must be a non-empty list of words")
    urls = project.get("urls", {})
    for key, url in project_urls().items():
        if urls.get(key) != url:
            problems.append(
                f'{where}: [project.urls] {key} must be "{url}" (found {urls.get(key)!r}); '
                "--fix rewrites it"
            )
    return problems


def check_dependencies(package: Package, root: Path, versions: dict[str, str]) -> list[str]:
    problems: list[str] = []
    where = f"{package.path.relative_to(root)}/pyproject.toml"
    for requirement, extra in package.runtime_requirements():
        name, specifier = parse_requirement(requirement)
        if not name.startswith("dsh-"):
            continue
        place = "dependencies" if extra is None else f"optional-dependencies.{extra}"
        if name not in versions:
            problems.append(
                f'{where}: {place} names "{requirement}", which is not a package under packages/*/*'
            )
            continue
        bound = minor_bound(versions[name])
        if set(specifier.split(",")) != set(bound.split(",")):
            problems.append(f'{where}: {place} "{requirement}" must be bounded: "{name}{bound}"')
    sources = package.pyproject.get("tool", {}).get("uv", {}).get("sources", {})
    sources = {normalize(k): v for k, v in sources.items()}
    named = package.runtime_dependencies() | package.dev_dependencies()
    for name in sorted(n for n in named if n in versions and n != package.name):
        if sources.get(name) != {"workspace": True}:
            problems.append(f"{where}: [tool.uv.sources] needs {name} = {{ workspace = true }}")
    return problems


def check_entry_points(package: Package, root: Path) -> list[str]:
    problems: list[str] = []
    where = f"{package.path.relative_to(root)}/pyproject.toml"
    groups: dict[str, dict[str, str]] = dict(package.project.get("entry-points", {}))
    for table in ("scripts", "gui-scripts"):
        if table in package.project:
            groups[f"[project.{table}]"] = package.project[table]
    for group, entries in sorted(groups.items()):
        for key, target in sorted(entries.items()):
            module = target.split(":", 1)[0].strip()
            file = package.path / "src" / Path(*module.split("."))
            if not (file.with_suffix(".py").is_file() or (file / "__init__.py").is_file()):
                problems.append(
                    f'{where}: {group} entry "{key}" = "{target}": no module {module} in src/'
                )
    plugins = groups.get(PLUGIN_GROUP)
    if plugins is None:
        return problems
    if package.name in MULTI_PLUGIN_PACKAGES:
        for key in sorted(plugins):
            if not key.startswith(f"{package.name}-"):
                problems.append(
                    f'{where}: {PLUGIN_GROUP} entry "{key}" must be named "{package.name}-<plugin>"'
                )
    elif set(plugins) != {package.name}:
        problems.append(
            f'{where}: {PLUGIN_GROUP} must have exactly one entry, named "{package.name}" '
            f"(found {sorted(plugins)})"
        )
    for key, target in sorted(plugins.items()):
        module = target.split(":", 1)[0].strip()
        if module != package.module and not module.startswith(package.module + "."):
            problems.append(
                f'{where}: {PLUGIN_GROUP} entry "{key}" points outside {package.module}: {target}'
            )
    return problems


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
    for pattern in (_INLINE_LINK, _REFERENCE_LINK, _HTML_LINK):
        for match in pattern.finditer(text):
            yield text.count("\n", 0, match.start()) + 1, match["target"]


def check_link(target: str, root: Path) -> str | None:
    """Why `target` breaks or leaves the one URL base, or None."""
    if not target or target.startswith(("#", "mailto:")):
        return None
    if not re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
        return (
            f"relative link {target!r} only resolves in the repository; "
            f"use {REPOSITORY}/blob/main/<path>"
        )
    match = _GITHUB_FILE.match(target)
    if match is None:
        return None
    if _through_another_base(match, root):
        return f"link {target!r} points at this repository through another base; use {REPOSITORY}"
    if match["base"] != REPOSITORY:
        return None  # another project's file
    if match["ref"] != "main":
        return f"link {target!r} should point at main"
    path = match["path"].rstrip("/")
    if not path or not (root / path).exists():
        return f"link {target!r}: {path or '(nothing)'} does not exist in the repository"
    return None


def _through_another_base(match: re.Match[str], root: Path) -> bool:
    """A GitHub file link to one of this repository's files with a base other than REPOSITORY
    (what is left after the base moved)."""
    path = match["path"].rstrip("/")
    return (
        match["base"] != REPOSITORY
        and path.split("/", 1)[0] in REPO_FOLDERS
        and (root / path).exists()
    )


def check_readme(package: Package, root: Path) -> list[str]:
    readme = package.path / "README.md"
    if not readme.is_file():
        return []
    where = readme.relative_to(root)
    text = readme.read_text()
    problems = [
        f"{where}:{line}: {reason}"
        for line, target in readme_links(text)
        if (reason := check_link(target, root)) is not None
    ]
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
            f"link it as [{path}]({REPOSITORY}/blob/main/{path})"
        )
    return problems


# --- fix: move the URL base -----------------------------------------------------------


def fix_urls(packages: list[Package], root: Path) -> list[str]:
    """Rewrite [project.urls] and README links into this repository to the one base."""
    changed: list[str] = []
    block = "[project.urls]\n" + "".join(f'{k} = "{v}"\n' for k, v in project_urls().items())
    for package in packages:
        pyproject = package.path / "pyproject.toml"
        text = pyproject.read_text()
        match = re.search(
            r"^\[project\.urls\]\n(?:(?!\[)[^\n]*\n)*?(?=\n*(?:\[|\Z))", text, re.MULTILINE
        )
        if match is not None:
            new = text[: match.start()] + block + text[match.end() :]
        else:
            header = re.search(r"^\[project\]\n", text, re.MULTILINE)
            following = re.search(r"^\[", text[header.end() :], re.MULTILINE) if header else None
            if header is None:
                continue
            at = header.end() + following.start() if following else len(text)
            new = text[:at] + block + "\n" + text[at:]
        if new != text:
            pyproject.write_text(new)
            changed.append(str(pyproject.relative_to(root)))
        readme = package.path / "README.md"
        if readme.is_file():
            text = readme.read_text()

            def rebase(match: re.Match[str]) -> str:
                if _through_another_base(match, root):
                    return f"{REPOSITORY}/{match['kind']}/main/{match['path']}"
                return match[0]

            new = _GITHUB_FILE.sub(rebase, text)
            if new != text:
                readme.write_text(new)
                changed.append(str(readme.relative_to(root)))
    return changed


# --- main -----------------------------------------------------------------------------


def check(root: Path = ROOT) -> list[str]:
    packages, problems = discover(root)
    names = {p.name for p in packages}
    for name in sorted({p.name for p in packages if [q.name for q in packages].count(p.name) > 1}):
        problems.append(f"packages/*/*: more than one folder declares {name}")
    root_pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    problems += check_root(root_pyproject, names)
    root_license_path = root / "LICENSE"
    root_license = root_license_path.read_bytes() if root_license_path.is_file() else None
    if root_license is None:
        problems.append("LICENSE: missing at the repository root")
    versions = {p.name: str(p.project.get("version", "0")) for p in packages}
    for package in packages:
        problems += check_layout(package, root)
        problems += check_metadata(package, root, root_license)
        problems += check_dependencies(package, root, versions)
        problems += check_entry_points(package, root)
        problems += check_readme(package, root)
    return problems


def main(argv: list[str]) -> int:
    if argv not in ([], ["--fix"]):
        print("usage: check_workspace.py [--fix]", file=sys.stderr)
        return 2
    if argv == ["--fix"]:
        packages, _ = discover(ROOT)
        for path in fix_urls(packages, ROOT):
            print(f"workspace: rewrote the URLs in {path}")
    problems = check(ROOT)
    for problem in problems:
        print(f"workspace: {problem}", file=sys.stderr)
    if problems:
        print(f"workspace: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"workspace: {len(discover(ROOT)[0])} packages checked, all consistent")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
