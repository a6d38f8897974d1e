"""Python samples, for check_samples.py: a page's blocks run in order in one namespace
(top-level await on the page's event loop), ``--8<--`` snippets expanded, ``<!-- source:
PATH#REGION -->`` blocks compared with their region, ``<!-- run with: ctx, parent -->``
fragments run in a context, and recipes run as scripts."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import inspect
import re
import subprocess
import sys
import traceback
import types
from pathlib import Path

from samples_page import PAGE_TIMEOUT, ROOT, PageReport, Sample, sample_env

SNIPPET = re.compile(r"^\s*--8<--\s+\"(?P<path>[^\":]+)(?::(?P<region>[\w-]+))?\"\s*$")


def _short_traceback(exc: BaseException, page: Path) -> str:
    """The exception, from the first frame on the page (the sample's own lines) on."""
    trace = traceback.TracebackException.from_exception(exc)
    frames = trace.stack
    first = next((i for i, frame in enumerate(frames) if frame.filename == str(page)), 0)
    trace.stack = traceback.StackSummary.from_list(frames[first:])
    text = "".join(trace.format())
    return text if len(text) < 4000 else "...\n" + text[-4000:]


def expand_snippets(code: str, where: str) -> str:
    """Replace ``--8<-- "PATH:REGION"`` lines as pymdownx.snippets does."""
    from dsh.testing.docs import source_region

    out: list[str] = []
    for line in code.splitlines():
        matched = SNIPPET.match(line)
        if not matched:
            out.append(line)
            continue
        path = ROOT / matched["path"]
        if not path.is_file():
            raise ValueError(f"{where}: the snippet {matched['path']} does not exist")
        if matched["region"]:
            out.append(source_region(path, matched["region"]).rstrip("\n"))
        else:
            text = path.read_text(encoding="utf-8")
            out += [ln for ln in text.splitlines() if "--8<-- [" not in ln]
    return "\n".join(out) + "\n"


def check_source(sample: Sample) -> str | None:
    """For ``<!-- source: PATH#REGION -->``: why the block differs from the region."""
    from dsh.testing.docs import source_region

    source = sample.comment("source")
    if source is None:
        return None
    path, _, region = source.partition("#")
    try:
        expected = source_region(ROOT / path, region)
    except (OSError, ValueError) as exc:
        return str(exc)
    if sample.code != expected:
        return f"the block no longer shows {source}: copy the region into the page"
    return None


def run_python(blocks: list[Sample], report: PageReport) -> None:
    """Run ``blocks`` in order in one fresh module, like dsh.testing.docs.run_python_blocks
    (page line numbers in tracebacks, a note naming the block), with top-level await: a
    block that awaits runs on the page's event loop."""
    module = types.ModuleType("__docs_sample__")
    sys.modules[module.__name__] = module
    loop = asyncio.new_event_loop()
    failed = False
    try:
        for sample in blocks:
            if failed:
                report.add(sample, "skipped", detail="an earlier block of the page failed")
                continue
            try:
                code = expand_snippets(sample.code, sample.where)
                padded = "\n" * (sample.line - 1) + code
                compiled = compile(
                    padded, str(sample.page), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
                )
                given = sample.comment("run with")
                if given is not None:
                    loop.run_until_complete(in_context(compiled, module, given, sample.where))
                elif compiled.co_flags & inspect.CO_COROUTINE:
                    loop.run_until_complete(eval(compiled, module.__dict__))
                else:
                    exec(compiled, module.__dict__)
            except BaseException as exc:
                if isinstance(exc, KeyboardInterrupt):
                    raise
                exc.add_note(f"in the python block at {sample.where}")
                report.add(sample, "run", False, _short_traceback(exc, sample.page))
                failed = True
            else:
                report.add(sample, "run")
    finally:
        with contextlib.suppress(Exception):
            loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
        sys.modules.pop(module.__name__, None)


CONTEXT_NAMES = {"ctx", "parent"}


async def in_context(
    compiled: types.CodeType, module: types.ModuleType, given: str, where: str
) -> None:
    """Run a fragment that uses ``ctx`` (a context opened on ./dsh.toml) and ``parent``
    (an agent of it): ``<!-- run with: ctx, parent -->`` before the fence."""
    from dsh.core import Context, load_preset

    names = {name.strip() for name in given.split(",") if name.strip()}
    if not names or names - CONTEXT_NAMES:
        raise ValueError(f"{where}: 'run with:' takes {', '.join(sorted(CONTEXT_NAMES))}")
    async with Context.open(load_preset("dsh.toml")) as ctx:
        values = {"ctx": ctx, "parent": ctx.agents.create()}
        module.__dict__.update({name: values[name] for name in names})
        try:
            result = eval(compiled, module.__dict__)
            if inspect.iscoroutine(result):
                await result
        finally:
            for name in names:
                module.__dict__.pop(name, None)


def run_recipe(sample: Sample, name: str, scratch: Path, report: PageReport) -> None:
    env = sample_env(scratch)
    try:
        done = subprocess.run(
            [sys.executable, name],
            cwd=scratch,
            env=env,
            capture_output=True,
            text=True,
            timeout=PAGE_TIMEOUT / 2,
            check=False,
        )
    except subprocess.TimeoutExpired:
        report.add(sample, "run", False, f"python {name} did not finish in time")
        return
    if done.returncode != 0:
        report.add(
            sample, "run", False, f"python {name} exited {done.returncode}:\n" + done.stderr[-3000:]
        )
    else:
        report.add(sample, "run", detail=f"python {name}")
