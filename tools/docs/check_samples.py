"""Check every code sample of the documentation: run it, load it, or parse it.

    python tools/docs/check_samples.py [-v] [PAGE ...]   (default: README.md, docs/**/*.md)

What each fenced block gets (tools/docs/README.md has the reasons):

* ``python`` -- run. A page's Python blocks run in order in one namespace, as a reader
  pasting them into ``python -m asyncio`` would (top-level ``await`` and ``async with``
  work), in a scratch working directory holding tools/docs/sandbox/dsh.toml (the
  standard preset with the scripted model, trusted as ``dsh init`` trusts the file it
  writes, in a trust store of the scratch's own) and the repository's README.md. A block
  after ``<!-- source: PATH#REGION -->`` must equal that region of the file; lines
  ``--8<-- "PATH:REGION"`` are replaced by the region, as pymdownx.snippets does.
* ``toml`` -- a preset (top-level keys among ``extends``, ``agent``, ``plugin``,
  ``permissions``, ``sandbox``) is parsed with ``dsh.core.parse_preset`` and loaded with
  ``Context.open`` (every plugin row found, configured and applied); other TOML
  (``title="pyproject.toml"`` and the like) is parsed as TOML.
* ``json`` -- parsed.
* ``sh``, ``bash``, ``shell``, ``console`` -- each command is checked: ``dsh ...`` and
  ``python -m dsh.cli ...`` parse with dsh's own argument parser (the command, its
  options, its arguments); repository scripts exist and know the options given;
  ``pip install dsh-...`` names a distribution of this repository (and its extras);
  test paths exist. Commands of other programs are named in ``EXTERNAL``.
* ``text`` or no language -- output, not checked.

A block after ``<!-- recipe: NAME -->`` is a file of that name: it is written into the
scratch directory before the page's samples run, and a Python recipe is run as a
script there (``python NAME``). A block that is only illustrative says so: a first
line ``# not run: <reason>``, or ``<!-- not run: <reason> -->`` right before its fence
(for blocks whose text must stay exact). Any other block -- a Python block that cannot
run, a language without a check -- fails.

Each page runs in a subprocess of its own, bounded in time. The exit status is 1 when
any sample fails; the report names the page and line of every failure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

from samples_page import PAGE_TIMEOUT, ROOT, Outcome, PageReport, Sample, rel, sample_env, samples
from samples_python import check_source, run_python, run_recipe
from samples_shell import SHELL, check_shell
from samples_toml import check_toml

SANDBOX = Path(__file__).resolve().parent / "sandbox"
OUTPUT = {"", "text", "txt", "output"}


# -- one page --------------------------------------------------------------------------


def trust_sandbox(scratch: Path) -> None:
    """Trust the scratch's dsh.toml as ``dsh init`` trusts the file it writes, so a
    sample's ``find_preset()`` reads it (run with the sample environment in place)."""
    from dsh.core.plugins import trust_preset

    trust_preset(scratch / "dsh.toml")


def prepare_scratch(scratch: Path) -> None:
    shutil.copy(SANDBOX / "dsh.toml", scratch / "dsh.toml")
    shutil.copy(ROOT / "README.md", scratch / "README.md")
    (scratch / "home").mkdir(exist_ok=True)


def check_page(page: Path) -> PageReport:
    """Check every sample of ``page`` (in this process; the caller isolates pages)."""
    report = PageReport(rel(page))
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="dsh-docs-") as tmp:
        scratch = Path(tmp)
        prepare_scratch(scratch)
        found = samples(page)
        recipes: list[tuple[Sample, str]] = []
        for sample in found:  # recipe files first: the page's samples may read them
            name = sample.comment("recipe")
            if name is not None:
                (scratch / name).write_text(sample.code, encoding="utf-8")
                recipes.append((sample, name))
        python: list[Sample] = []
        for sample in found:
            reason = sample.not_run
            language = sample.language
            recipe = sample.comment("recipe")
            if language in OUTPUT:
                report.add(sample, "output")
            elif reason is not None and language != "toml":
                if not reason:
                    report.add(sample, "not run", False, "'not run:' needs a reason")
                else:
                    report.add(sample, "not run", detail=reason)
            elif language == "python":
                problem = check_source(sample)
                if problem:
                    report.add(sample, "run", False, problem)
                elif recipe is not None:
                    run_recipe(sample, recipe, scratch, report)
                else:
                    python.append(sample)
            elif language == "toml":
                check_toml(sample, scratch, report)
            elif language == "json":
                try:
                    json.loads(sample.code)
                except json.JSONDecodeError as exc:
                    report.add(sample, "parsed", False, f"not JSON: {exc}")
                else:
                    report.add(sample, "parsed", detail="JSON")
            elif language in SHELL:
                check_shell(sample, scratch, report)
            else:
                report.add(
                    sample,
                    "unchecked",
                    False,
                    f"no check for {language!r} blocks: mark it '<!-- not run: reason -->'"
                    " or add a check to tools/docs/check_samples.py",
                )
        if python:
            previous = Path.cwd()
            old_env = dict(os.environ)
            os.chdir(scratch)
            os.environ.clear()
            os.environ.update(sample_env(scratch))
            try:
                trust_sandbox(scratch)
                run_python(python, report)
            finally:
                os.chdir(previous)
                os.environ.clear()
                os.environ.update(old_env)
    report.outcomes.sort(key=lambda o: int(o.where.rsplit(":", 1)[1]))
    report.seconds = time.perf_counter() - started
    return report


# -- many pages ------------------------------------------------------------------------


def default_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _await_watchdog(owner: int, timeout: float = 10.0) -> None:
    """Wait until the dsh watchdog of the page's worker (started with the first child
    process a sample spawned) has swept up after the worker and exited, so the checker
    leaves no process behind. Linux only (/proc); elsewhere it returns at once."""
    proc = Path("/proc")
    if not proc.is_dir():
        return
    marker = f"dsh-watchdog {owner}".encode()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = False
        for entry in proc.iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if marker + b"." in cmdline or cmdline.rstrip().endswith(marker):
                alive = True
                break
        if not alive:
            return
        time.sleep(0.05)


def check_in_subprocess(page: Path) -> PageReport:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as out:
        result = Path(out.name)
    try:
        with subprocess.Popen(
            [sys.executable, __file__, "--page", str(page), "--report", str(result)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        ) as worker:
            try:
                output, _ = worker.communicate(timeout=PAGE_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, 9)
                worker.communicate()
                raise
            finally:
                _await_watchdog(worker.pid)
        done = subprocess.CompletedProcess(worker.args, worker.returncode, output, "")
        if done.returncode != 0 or not result.stat().st_size:
            report = PageReport(rel(page), output=output)
            report.outcomes.append(
                Outcome(rel(page), "", "run", False, f"the checker exited {done.returncode}")
            )
            return report
        data = json.loads(result.read_text())
        report = PageReport(data["page"], [Outcome(**o) for o in data["outcomes"]], output)
        report.seconds = data["seconds"]
        return report
    except subprocess.TimeoutExpired as exc:
        report = PageReport(rel(page), output=str(exc.stdout or "") + str(exc.stderr or ""))
        report.outcomes.append(
            Outcome(rel(page), "", "run", False, f"did not finish within {PAGE_TIMEOUT:.0f} s")
        )
        return report
    finally:
        result.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pages", nargs="*", type=Path, help="default: README.md, docs/**/*.md")
    parser.add_argument("-v", "--verbose", action="store_true", help="list every sample")
    parser.add_argument("-j", "--jobs", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--page", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--report", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.page is not None:  # the worker: one page, in this process
        report = check_page(args.page)
        args.report.write_text(json.dumps(asdict(report)))
        return 0

    pages = [p.resolve() for p in args.pages] or default_pages()
    missing = [p for p in pages if not p.is_file()]
    if missing:
        parser.error(f"no such page: {', '.join(map(str, missing))}")
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        reports = list(pool.map(check_in_subprocess, pages))
    totals: dict[str, int] = {}
    failures = 0
    for report in reports:
        bad = [o for o in report.outcomes if not o.ok]
        failures += len(bad)
        for outcome in report.outcomes:
            totals[outcome.how] = totals.get(outcome.how, 0) + 1
        if args.verbose or bad:
            summary = ", ".join(
                f"{sum(o.how == how for o in report.outcomes)} {how}"
                for how in dict.fromkeys(o.how for o in report.outcomes)
            )
            print(f"{report.page}: {summary or 'no samples'} ({report.seconds:.1f} s)")
        if args.verbose:
            for outcome in report.outcomes:
                mark = "ok  " if outcome.ok else "FAIL"
                first = outcome.detail.splitlines()[0] if outcome.detail else ""
                print(f"  {mark} {outcome.where} [{outcome.language or '-'}] {outcome.how} {first}")
        for outcome in bad:
            print(f"FAILED {outcome.where} [{outcome.language or '-'}] {outcome.how}:")
            print("  " + outcome.detail.replace("\n", "\n  "))
        if bad and report.output.strip():
            print(
                f"  output of {report.page}:\n    " + report.output[-3000:].replace("\n", "\n    ")
            )
    counted = ", ".join(f"{n} {how}" for how, n in sorted(totals.items()))
    print(
        f"samples: {len(reports)} pages, {sum(totals.values())} blocks ({counted});"
        f" {failures} failed, in {time.perf_counter() - started:.1f} s"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
