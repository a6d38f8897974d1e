"""Write the API reference pages: one page per distribution under packages/*/*/.

Each distribution's pyproject ``name`` gives its import name by the naming rule
(``dsh-a-b-c`` imports as ``dsh.a_b_c``). Its page documents, with mkdocstrings, only
the public names: the import package's ``__all__``, and the ``__all__`` of each public
submodule (no leading underscore in any part of its name) that defines one, unless
everything that submodule exports is already exported by its package. A module without
``__all__`` documents nothing of its own. ``__all__`` is read from the source without
importing it (a literal list or tuple of strings; anything else fails loudly).

tools/docs.sh runs this before every build, so a new package gets its page, and a
removed one loses it, without a hand edit: every ``*.md`` in the output folder is
rewritten or removed. The pages are committed too (deterministic output), so that the
reference index reads on GitHub; a build never depends on them being current.

Each page links its package's source under ``--repository`` (default: REPOSITORY in
tools/project_home.py, the one setting for the public addresses); with no repository
(the project has no public address yet) it names the folder as code text instead.

    python tools/docs/gen_reference.py [--root DIR] [--out DIR] [--repository URL]
"""

from __future__ import annotations

import argparse
import ast
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
from project_home import REPOSITORY  # noqa: E402  (tools/ is not a package)


@dataclass(frozen=True)
class Module:
    name: str  # dotted import name
    exports: tuple[str, ...]  # its __all__


@dataclass(frozen=True)
class Distribution:
    name: str
    import_name: str
    group: str  # the folder under packages/
    folder: Path
    description: str
    modules: tuple[Module, ...]


def import_name(distribution: str) -> str:
    """``dsh-a-b-c`` -> ``dsh.a_b_c`` (the naming rule)."""
    head, _, rest = distribution.partition("-")
    if head != "dsh" or not rest:
        raise ValueError(f"{distribution!r} does not follow the naming rule dsh-a-b-c")
    return f"dsh.{rest.replace('-', '_')}"


def read_all(path: Path) -> tuple[str, ...] | None:
    """The literal ``__all__`` of the module at ``path``; None when it defines none."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found: tuple[str, ...] | None = None
    for node in tree.body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign) and node.value is not None
            else []
        )
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            assert isinstance(node, ast.Assign | ast.AnnAssign)
            assert node.value is not None
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                raise SystemExit(f"{path}:{node.lineno}: __all__ is not a literal list") from None
            if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
                raise SystemExit(f"{path}:{node.lineno}: __all__ is not a list of strings")
            found = tuple(value)
    return found


def public_modules(package_dir: Path, package: str) -> list[Module]:
    """The package and its public submodules that define ``__all__``, package first."""
    modules: list[Module] = []
    init = package_dir / "__init__.py"
    exported = read_all(init) if init.exists() else None
    if exported:
        modules.append(Module(package, exported))
    for child in sorted(package_dir.iterdir()):
        if child.name.startswith(("_", ".")):
            continue
        if child.is_dir() and (child / "__init__.py").exists():
            modules += public_modules(child, f"{package}.{child.name}")
        elif child.suffix == ".py":
            names = read_all(child)
            if names and not set(names) <= set(exported or ()):
                modules.append(Module(f"{package}.{child.stem}", names))
    return modules


def distributions(root: Path) -> list[Distribution]:
    found: list[Distribution] = []
    for pyproject in sorted(root.glob("packages/*/*/pyproject.toml")):
        project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
        name = project["name"]
        dotted = import_name(name)
        package_dir = pyproject.parent / "src" / Path(*dotted.split("."))
        if not package_dir.is_dir():
            raise SystemExit(f"{pyproject}: {name} should import as {dotted}: no {package_dir}")
        found.append(
            Distribution(
                name=name,
                import_name=dotted,
                group=pyproject.parent.parent.name,
                folder=pyproject.parent.relative_to(root),
                description=project.get("description", ""),
                modules=tuple(public_modules(package_dir, dotted)),
            )
        )
    if not found:
        raise SystemExit(f"no packages under {root}/packages/*/*/")
    return found


def page(dist: Distribution, repository: str | None) -> str:
    folder = dist.folder.as_posix()
    source = f"[source]({repository}/tree/main/{folder})" if repository else f"source: `{folder}/`"
    lines = [
        f"# {dist.name}",
        "",
        f"{dist.description}",
        "",
        f"`pip install {dist.name}` · `import {dist.import_name}` · {source}",
        "",
    ]
    if not dist.modules:
        lines += [f"`{dist.import_name}` exports no public names (no `__all__`).", ""]
    for module in dist.modules:
        lines += [
            f"::: {module.name}",
            "    options:",
            "      members:",
            *(f"        - {name}" for name in module.exports),
            "",
        ]
    return "\n".join(lines)


def index(dists: list[Distribution]) -> str:
    lines = [
        "# API reference",
        "",
        "One page per published distribution, generated from the docstrings. Each page",
        "shows only the public names: what the package's `__all__` exports, and the",
        "`__all__` of its public submodules. Everything else (modules whose name starts",
        "with `_`) is private and may change without notice.",
        "",
        "| distribution | import | what it is |",
        "|---|---|---|",
    ]
    for dist in dists:
        lines.append(
            f"| [{dist.name}]({dist.name}.md) | `{dist.import_name}` | {dist.description} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument("--out", type=Path, default=None, help="default: ROOT/docs/reference")
    parser.add_argument(
        "--repository",
        default=REPOSITORY,
        help="the repository's address, for source links (default: none, names the folder)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 naming the pages that differ from what the code gives",
    )
    args = parser.parse_args(argv)
    out: Path = args.out or args.root / "docs" / "reference"
    out.mkdir(parents=True, exist_ok=True)
    dists = distributions(args.root)
    wanted = {f"{dist.name}.md": page(dist, args.repository) for dist in dists}
    wanted["index.md"] = index(dists)
    if args.check:
        differ = sorted(
            name
            for name, text in wanted.items()
            if not (out / name).exists() or (out / name).read_text(encoding="utf-8") != text
        )
        differ += sorted(p.name for p in out.glob("*.md") if p.name not in wanted)
        if differ:
            print(
                f"gen_reference: {', '.join(differ)} in {out} differ from the code;"
                " run tools/docs/gen_reference.py and commit the result",
                file=sys.stderr,
            )
            return 1
        print(f"gen_reference: {len(wanted)} pages match the code", file=sys.stderr)
        return 0
    for stale in out.glob("*.md"):
        if stale.name not in wanted:
            stale.unlink()
    for name, text in wanted.items():
        target = out / name
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
    print(f"gen_reference: {len(dists)} distributions -> {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
