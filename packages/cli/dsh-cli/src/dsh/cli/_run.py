"""``dsh run``: run an agent from a preset on one task, show the delegation tree, print
the answer and what it cost.

Exit status: 0 when the lead's (last) turn completed, 1 when it ended otherwise, 2 for
a usage or configuration error, 130 on Ctrl-C (143 on SIGTERM).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

import anyio

from dsh.cli._interrupt import Interrupt
from dsh.cli._models import EnvModel, with_env_model
from dsh.cli._presets import resolve_preset
from dsh.cli._view import RunView
from dsh.cli._watch import choose_view, summarize, watch
from dsh.core import Agent, Context, DshError, Preset, PresetError, TurnOutcome

__all__ = ["check_cwd", "run_command"]

NO_MODEL = """\
dsh run: no model is configured in {source}, and the environment names none.

Set one of these (the first one set wins):
  OPENAI_BASE_URL   an OpenAI-compatible server (vLLM, Ollama, llama.cpp, ...); with
                    OPENAI_API_KEY if it needs a key, OPENAI_MODEL for the model
  DEEPSEEK_API_KEY  DeepSeek (deepseek-chat; DEEPSEEK_MODEL to change)
  OPENAI_API_KEY    OpenAI (gpt-4o-mini; OPENAI_MODEL to change)

or add a model to your preset (dsh init writes a dsh.toml to start from):

  extends = "standard"
  [agent.model]
  adapter = "openai"          # OpenAI-compatible; the standard preset loads it
  model = "deepseek-chat"
  options = {{ base_url = "https://api.deepseek.com", api_key_env = "DEEPSEEK_API_KEY" }}

or try the offline delegation demo, which needs no model:  dsh demo"""


def _fail(message: str) -> int:
    print(f"dsh run: {message}", file=sys.stderr)
    return 2


def check_cwd(value: str | None) -> Path | None:
    """``--cwd`` resolved; ``ValueError`` saying what is wrong with it."""
    if value is None:
        return None
    path = Path(value).expanduser()
    if not path.exists():
        raise ValueError(f"--cwd {value}: no such directory")
    if not path.is_dir():
        raise ValueError(f"--cwd {value}: not a directory")
    return path.resolve()


def run_command(args: argparse.Namespace) -> int:
    """``dsh run``."""
    try:
        cwd = check_cwd(args.cwd)
    except ValueError as exc:
        return _fail(str(exc))
    try:
        preset = resolve_preset(args.preset, cwd)
    except (PresetError, OSError) as exc:
        return _fail(str(exc))
    preset, env_model = with_env_model(preset, os.environ)
    if preset.agent.model is None:
        print(NO_MODEL.format(source=preset.source), file=sys.stderr)
        return 2
    view = choose_view(json_lines=args.json)
    try:
        return anyio.run(_run, args, preset, cwd, env_model, view)
    finally:
        view.close()


async def _run(
    args: argparse.Namespace,
    preset: Preset,
    cwd: Path | None,
    env_model: EnvModel | None,
    view: RunView,
) -> int:
    interrupt = Interrupt()
    outcome: TurnOutcome | None = None
    try:
        async with Context.open(preset, cwd=cwd, sessions_dir=args.sessions_dir) as ctx:
            if args.yes:
                ctx.permissions.allow_all = True
            elif sys.stdin.isatty() and sys.stderr.isatty():
                from dsh.cli._approve import TerminalApprover

                ctx.permissions.set_approver(TerminalApprover(view.suspended))
            lead = ctx.agents.create(label="lead")
            view.on_output_closed = lambda: interrupt.stop(signal.SIGPIPE)
            unwatch = watch(ctx, lead, view)
            if env_model is not None:
                view.notice(f"dsh: {env_model.describe()}")
            with anyio.CancelScope() as scope, interrupt.catching(scope):
                await lead.run(args.task)
                await _settle_jobs(ctx, lead, view, detach=args.detach)
            outcome = _last_outcome(lead)
            if interrupt.signal is not None:
                view.interrupted()
            else:
                view.finish(summarize(ctx, lead, outcome))
            unwatch()
            view.close()
            if args.verbose:
                for event in lead.session.events:
                    print(f"{event.seq:4} {event.type:20} {dict(event.data)}", file=sys.stderr)
    except DshError as exc:
        view.close()
        return _fail(_explain(exc, preset))
    if interrupt.signal == signal.SIGPIPE:
        return interrupt.exit_status  # the reader went away (| head): nothing to say
    if interrupt.signal is not None:
        print("dsh: interrupted", file=sys.stderr)
        return interrupt.exit_status
    if outcome is None:
        return _fail("the lead ended no turn")
    if outcome.stop_reason != "completed":
        detail = f": {outcome.error}" if outcome.error else ""
        print(f"dsh run: turn ended {outcome.stop_reason}{detail}", file=sys.stderr)
        return 1
    return 0


def _explain(exc: DshError, preset: Preset) -> str:
    text = str(exc)
    model = preset.agent.model
    if model is not None and f'no LLM adapter named "{model.adapter}"' in text:
        text = f"[agent.model] of {preset.source}: {text}"
        if model.adapter == "openai":
            text += (
                '; the "openai" adapter comes with the dsh-llm-openai plugin: add'
                ' extends = "standard" to the preset, or a [[plugin]] row with'
                ' name = "dsh-llm-openai"'
            )
    return text


def _last_outcome(lead: Agent) -> TurnOutcome | None:
    for event in reversed(lead.session.events):
        if event.type == "turn/end":
            return TurnOutcome.of(event)
    return None


async def _settle_jobs(ctx: Context, lead: Agent, view: RunView, *, detach: bool) -> None:
    """Wait for the background jobs still running (their completion notices may start
    more turns of the lead), or with ``detach`` kill them and say which."""
    while True:
        running = [job for job in ctx.jobs.list() if not job.settled]
        if not running:
            await lead.when_idle()
            if any(not job.settled for job in ctx.jobs.list()):
                continue
            return
        names = ", ".join(
            f"{job.id} ({job.description})" if job.description else job.id for job in running
        )
        count = f"{len(running)} background job{'s' if len(running) > 1 else ''}"
        if detach:
            for job in running:
                ctx.jobs.kill(job.id, "dsh run --detach", notify=False)
            for job in running:
                await job.wait()
            view.notice(f"dsh: --detach: killed {count}: {names}")
            return
        view.notice(f"dsh: waiting for {count} to finish: {names} (Ctrl-C stops them)")
        for job in running:
            await job.wait()
        await lead.drive()
