"""Check the workspace's hand-kept lists and every package's publishing metadata.

The distributions are the folders ``packages/<group>/<dist>/``, named by their
pyproject ``name``; everything below is checked against that list.

* The root pyproject's ``[project].dependencies`` and ``[tool.uv.sources]`` name
  exactly those distributions (the sources as ``{ workspace = true }``).
* Every package: its folder is named after its distribution; a ``README.md`` (its
  ``readme``) without links that only resolve inside the repository, naming the
  repository's files as tools/project_home.py says (code text while the project
  has no public address, links under it once it has one);
  ``src/dsh/<import_name>/py.typed`` by the naming rule (``dsh-a-b-c`` imports as
  ``dsh.a_b_c``) and nothing else under ``src/dsh`` (no ``src/dsh/__init__.py``:
  ``dsh`` is a PEP 420 namespace); a ``tests/`` folder; a wheel built from
  ``src/dsh`` by hatchling new enough for ``license-files``.
* Metadata: ``license = "MIT"`` with ``license-files = ["LICENSE"]`` and a
  ``LICENSE`` identical to the root one (hatchling cannot ship files from outside
  the project folder, so each package keeps a copy); the authors; the required
  classifiers and no ``License ::`` classifier (the SPDX ``license`` replaces
  them); keywords; ``[project.urls]`` by the rules of tools/project_home.py (none
  while the project has no public address).
* Every runtime dependency on a sibling (``dependencies`` and extras; dev groups
  are free) is bounded to the sibling's minor series, e.g. ``dsh-core>=0.1,<0.2``,
  and every sibling a package names has a ``{ workspace = true }`` source.
* A ``dsh.plugins`` entry-point group has one entry, named after the distribution
  and pointing into the package (dsh-testing, which declares several test
  plugins, is checked by MULTI_PLUGIN_PACKAGES instead); every entry point and
  script names a module that exists under ``src/``.

The public addresses are set in tools/project_home.py and nowhere else (REPOSITORY
and DOCUMENTATION, None for now). After changing them, run with ``--fix``, which
rewrites every package's ``[project.urls]`` and the README links into this
repository; ``--self-test`` checks those rules on a throwaway workspace.

    uv run --frozen python tools/check_workspace.py [--fix | --self-test]
"""

from __future__ import annotations

import re
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import project_home
from project_home import check_project_urls, fix_package

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
    problems += check_project_urls(project, where)
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


# --- README links and the URL base (rules in tools/project_home.py) ---------------------


def check_readme(package: Package, root: Path) -> list[str]:
    readme = package.path / "README.md"
    if not readme.is_file():
        return []
    return project_home.check_readme(readme, root)


def fix_urls(packages: list[Package], root: Path) -> list[str]:
    """Rewrite [project.urls] and README links into this repository to the one setting."""
    return [path for package in packages for path in fix_package(package.path, root)]


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
    if argv not in ([], ["--fix"], ["--self-test"]):
        print("usage: check_workspace.py [--fix | --self-test]", file=sys.stderr)
        return 2
    if argv == ["--self-test"]:
        failures = project_home.self_test()
        for failure in failures:
            print(f"workspace self-test: FAILED {failure}", file=sys.stderr)
        if failures:
            return 1
        print("workspace self-test: the URL and README rules pass")
        return 0
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
