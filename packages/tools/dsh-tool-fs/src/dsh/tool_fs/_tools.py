"""The model-facing file tools: argument models, descriptions, titles, permissions.

``read_file``'s result also carries the lines exactly as they are in the file in
its ``data`` (``{"text": ..., "complete": bool}``: no marker, line ends kept;
``complete`` is False when the caps cut the lines asked for short), for callers
that go through the registry rather than the model (the ``acp`` provider serving
``fs/read_text_file``).

Every call resolves its root (config ``root``, else the calling agent's cwd, else the
context's), then runs the operation in a worker thread. A cancelled call stops the
operation at its next check and returns at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import anyio
from pydantic import BaseModel, ConfigDict, Field

from dsh.core import AbortSignal, Tool, ToolContext, ToolResult
from dsh.tool_fs._config import FsConfig, FsToolName
from dsh.tool_fs._ops import Limits, ReadText, Stopped, glob_paths, grep, list_dir, read_file
from dsh.tool_fs._paths import FsError, Root
from dsh.tool_fs._write import WriteGuard, edit_file, write_file

__all__ = ["fs_tools"]

_CONFINED = (
    " Paths are relative to the working directory; anything outside it (absolute paths"
    " elsewhere, `..`, symlinks pointing out) is refused."
)
_PROTECTED = (
    " Files under .git and .dsh and dsh's preset files are protected (refused), as are"
    " files with several hard links and special files."
)


class ReadFileArgs(BaseModel):
    """Arguments of ``read_file``."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="The file, relative to the working directory.")
    offset: int = Field(1, ge=1, description="First line to read (1-based).")
    limit: int | None = Field(None, ge=1, description="How many lines to read at most.")


class ListDirArgs(BaseModel):
    """Arguments of ``list_dir``."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(".", description="The directory, relative to the working directory.")


class GlobArgs(BaseModel):
    """Arguments of ``glob``."""

    model_config = ConfigDict(extra="forbid")

    pattern: str = Field(
        description='Glob pattern relative to path: "**/*.py", "src/*.{ts,tsx}", "docs/*".'
    )
    path: str = Field(".", description="Directory to search in (default: the working directory).")


class GrepArgs(BaseModel):
    """Arguments of ``grep``."""

    model_config = ConfigDict(extra="forbid")

    pattern: str = Field(description="Regular expression (Python syntax) to search for.")
    path: str = Field(".", description="File or directory to search (default: everything).")
    glob: str | None = Field(
        None, description='Only files whose name (or path, with a "/") matches: "*.py".'
    )
    ignore_case: bool = Field(False, description="Match case-insensitively.")
    max_matches: int | None = Field(None, ge=1, description="Stop after this many matches.")


class WriteFileArgs(BaseModel):
    """Arguments of ``write_file``."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="The file, relative to the working directory.")
    content: str = Field(description="The whole new content of the file.")


class EditFileArgs(BaseModel):
    """Arguments of ``edit_file``."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="The file, relative to the working directory.")
    old_string: str = Field(description="The exact text to replace (must occur exactly once).")
    new_string: str = Field(description="The text to put in its place.")
    replace_all: bool = Field(False, description="Replace every occurrence of old_string.")


class _Runner:
    """Runs operations for one plugin row: root per call, worker thread, cancellation."""

    __slots__ = ("config", "limits")

    def __init__(self, config: FsConfig) -> None:
        self.config = config
        self.limits = Limits(
            max_read_bytes=config.max_read_bytes,
            max_read_lines=config.max_read_lines,
            max_output_bytes=config.max_output_bytes,
            max_results=config.max_results,
            max_matches=config.max_matches,
            skip_dirs=frozenset(config.skip_dirs),
            grep_timeout=config.grep_timeout,
        )

    def directory(self, tctx: ToolContext) -> str:
        """The root directory of this call, before resolution."""
        agent = tctx.agent
        return self.config.root or agent.cwd or agent.ctx.cwd

    def guard(self, tctx: ToolContext, root: Root) -> WriteGuard:
        """What this call may write: the agent's sandbox narrowed by the row (clamped,
        not refused: the row was checked against the preset at load)."""
        policy = tctx.agent.sandbox.narrowed(self.config.sandbox, strict=False)
        return WriteGuard.of(policy, root.path, self.config.allow_write)

    async def run(
        self,
        tctx: ToolContext,
        operation: Callable[[Root, Callable[[], None]], str | ReadText],
        *,
        abandon: bool = True,
    ) -> ToolResult:
        """Run ``operation(root, check)`` in a worker thread. With ``abandon``, a
        cancelled call returns at once and the thread stops at its next check;
        without, the call waits for the (short) operation to finish."""
        signal: AbortSignal = tctx.signal
        if signal.aborted:
            return ToolResult(f"cancelled: {signal.reason}", is_error=True)
        stop = threading.Event()
        unlink = signal.on_abort(lambda _reason: stop.set())
        directory = self.directory(tctx)

        def check() -> None:
            if stop.is_set():
                raise Stopped

        def work() -> str | ReadText:
            return operation(Root(directory), check)

        try:
            outcome = await anyio.to_thread.run_sync(work, abandon_on_cancel=abandon)
        except Stopped:
            return ToolResult(f"cancelled: {signal.reason or 'cancelled'}", is_error=True)
        except FsError as exc:
            return ToolResult(str(exc), is_error=True)
        except OSError as exc:
            where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
            return ToolResult(f"{exc.strerror or exc}{where}", is_error=True)
        finally:
            stop.set()
            unlink()
        if isinstance(outcome, ReadText):
            return ToolResult(
                outcome.shown, data={"text": outcome.exact, "complete": outcome.complete}
            )
        return ToolResult(outcome)


def fs_tools(config: FsConfig) -> list[Tool]:
    """The tools ``config`` enables, named with its prefix."""
    runner = _Runner(config)
    makers: dict[FsToolName, Callable[[_Runner, str], Tool]] = {
        "read_file": _read_file_tool,
        "list_dir": _list_dir_tool,
        "glob": _glob_tool,
        "grep": _grep_tool,
        "write_file": _write_file_tool,
        "edit_file": _edit_file_tool,
    }
    return [makers[name](runner, config.prefix + name) for name in config.tools]


def _read_file_tool(runner: _Runner, name: str) -> Tool:
    limits = runner.limits

    async def run(args: ReadFileArgs, tctx: ToolContext) -> ToolResult:
        return await runner.run(
            tctx,
            lambda root, check: read_file(root, args.path, args.offset, args.limit, limits, check),
        )

    def title(args: ReadFileArgs) -> str:
        if args.offset > 1:
            return f"Read {args.path} from line {args.offset}"
        return f"Read {args.path}"

    return Tool.from_model(
        name,
        "Read a text file. Returns its lines as they are; at most"
        f" {limits.max_read_lines} lines and {limits.max_read_bytes} bytes per call, and a"
        " [truncated: ...] line saying which offset to read on from when the file goes on."
        + _CONFINED,
        ReadFileArgs,
        run,
        permission="allow",
        kind="read",
        title=title,
    )


def _list_dir_tool(runner: _Runner, name: str) -> Tool:
    limits = runner.limits

    async def run(args: ListDirArgs, tctx: ToolContext) -> ToolResult:
        return await runner.run(tctx, lambda root, check: list_dir(root, args.path, limits, check))

    return Tool.from_model(
        name,
        "List a directory: one entry per line, sorted by name; directories end in /,"
        f" symlinks show their target. At most {limits.max_results} entries." + _CONFINED,
        ListDirArgs,
        run,
        permission="allow",
        kind="read",
        title=lambda args: (
            "List the working directory" if args.path in ("", ".") else f"List {args.path}"
        ),
    )


def _glob_tool(runner: _Runner, name: str) -> Tool:
    limits = runner.limits

    async def run(args: GlobArgs, tctx: ToolContext) -> ToolResult:
        return await runner.run(
            tctx, lambda root, check: glob_paths(root, args.pattern, args.path, limits, check)
        )

    def title(args: GlobArgs) -> str:
        return f"Find {args.pattern}" + ("" if args.path in ("", ".") else f" in {args.path}")

    return Tool.from_model(
        name,
        "Find files and directories by glob pattern. * and ? stay within a path segment,"
        " ** spans directories (**/*.py finds Python files at any depth), {a,b} gives"
        " alternatives. Returns matching paths relative to the working directory"
        f" (directories end in /), at most {limits.max_results}. Directories such as .git and"
        " node_modules are not searched unless given as path." + _CONFINED,
        GlobArgs,
        run,
        permission="allow",
        kind="search",
        title=title,
    )


def _grep_tool(runner: _Runner, name: str) -> Tool:
    limits = runner.limits

    async def run(args: GrepArgs, tctx: ToolContext) -> ToolResult:
        return await runner.run(
            tctx,
            lambda root, check: grep(
                root,
                args.pattern,
                args.path,
                args.glob,
                args.ignore_case,
                args.max_matches,
                limits,
                check,
            ),
        )

    def title(args: GrepArgs) -> str:
        where = "" if args.path in ("", ".") else f" in {args.path}"
        return f"Search for /{args.pattern}/{where}"

    return Tool.from_model(
        name,
        "Search file contents, line by line, with a regular expression (Python syntax)."
        f" Returns matching lines as path:line:text, at most {limits.max_matches}; binary"
        " files are skipped; a pattern too slow to match ends the search with an error."
        " Narrow with path (a file or directory) and glob (file names, e.g. *.py)." + _CONFINED,
        GrepArgs,
        run,
        permission="allow",
        kind="search",
        title=title,
    )


def _write_file_tool(runner: _Runner, name: str) -> Tool:
    async def run(args: WriteFileArgs, tctx: ToolContext) -> ToolResult:
        return await runner.run(
            tctx,
            lambda root, _check: write_file(
                root, args.path, args.content, runner.guard(tctx, root)
            ),
            abandon=False,
        )

    return Tool.from_model(
        name,
        "Create a file or replace its whole content (UTF-8); missing parent directories are"
        " created. To change part of a file, prefer edit_file." + _CONFINED + _PROTECTED,
        WriteFileArgs,
        run,
        concurrency_safe=False,
        permission="ask",
        kind="edit",
        title=lambda args: f"Write {args.path}",
    )


def _edit_file_tool(runner: _Runner, name: str) -> Tool:
    async def run(args: EditFileArgs, tctx: ToolContext) -> ToolResult:
        return await runner.run(
            tctx,
            lambda root, _check: edit_file(
                root,
                args.path,
                args.old_string,
                args.new_string,
                args.replace_all,
                runner.guard(tctx, root),
            ),
            abandon=False,
        )

    return Tool.from_model(
        name,
        "Edit a text file by exact string replacement: old_string must occur exactly once"
        " (copy it from the file with its whitespace; add surrounding lines to make it"
        " unique), or set replace_all to replace every occurrence." + _CONFINED + _PROTECTED,
        EditFileArgs,
        run,
        concurrency_safe=False,
        permission="ask",
        kind="edit",
        title=lambda args: f"Edit {args.path}",
    )
