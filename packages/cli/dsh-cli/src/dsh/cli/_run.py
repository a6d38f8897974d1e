"""``dsh run``: run an agent from a preset on one task, show the delegation tree, print
the answer and what it cost.

Exit status: 0 when the lead's (last) turn completed, 1 when it ended otherwise, 2 for
a usage or configuration error (an untrusted ``./dsh.toml`` without a terminal to ask
on included), 3 when it completed with failures along the way (a tool call the
permissions refused, a delegation that failed or could not start), 130 on Ctrl-C (143
on SIGTERM).
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from dsh.cli._interrupt import Interrupt
from dsh.cli._models import EnvModel, env_model_for
from dsh.cli._presets import resolve_preset
from dsh.cli._safe_text import strip_controls
from dsh.cli._view import RunView
from dsh.cli._watch import choose_view, summarize, watch
from dsh.core import Agent, Context, DshError, Preset, PresetError, TurnOutcome
from dsh.core.plugins import UntrustedPresetError
from dsh.core.sessions import SessionError
from dsh.subagent import Budget, BudgetMeter, SubagentRuntime

if TYPE_CHECKING:
    from dsh.tape import TapeProxy

__all__ = ["FINISHED_WITH_FAILURES", "check_cwd", "run_command"]

FINISHED_WITH_FAILURES = 3
"""Exit status of a run whose turn completed although a tool call was refused or a
delegation failed or could not start on the way."""

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
    print(f"dsh run: {strip_controls(message)}", file=sys.stderr)
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


def budget_of(args: argparse.Namespace) -> Budget | None:
    """The run's budget from ``--budget-*`` (None: none); ``ValueError`` naming the flag."""
    caps = {
        "tokens": args.budget_tokens,
        "usd": args.budget_usd,
        "seconds": args.budget_seconds,
        "children": args.budget_children,
        "turns": args.budget_turns,
    }
    if all(value is None for value in caps.values()):
        return None
    for name, value in caps.items():
        if value is not None:
            try:
                Budget(**{name: value})
            except ValueError as exc:
                problem = str(exc).split(";")[0]
                raise ValueError(
                    f"--budget-{name} {value}: {problem}; omit the flag for no cap"
                ) from None
    return Budget(**caps)


def budget_line(meter: BudgetMeter) -> str:
    """What the run spent against each cap of its budget (``budget: 1,000 of 1,000
    tokens, 0.4 s of 600 s``)."""
    budget = meter.budget
    parts = []
    if budget.tokens is not None:
        parts.append(f"{meter.tokens:,} of {budget.tokens:,} tokens")
    if budget.usd is not None:
        parts.append(f"${meter.usd:.4f} of ${budget.usd:.2f}")
    if budget.seconds is not None:
        parts.append(f"{meter.spent()['seconds']:.1f} s of {round(budget.seconds, 1):g} s")
    if budget.children is not None:
        parts.append(f"{meter.children} of {budget.children} delegations")
    if budget.turns is not None:
        parts.append(f"{meter.turns} of {budget.turns} model calls")
    return "budget: " + ", ".join(parts)


def run_command(args: argparse.Namespace) -> int:
    """``dsh run``."""
    try:
        cwd = check_cwd(args.cwd)
        args.budget = budget_of(args)
    except ValueError as exc:
        return _fail(str(exc))
    try:
        preset = _trusted_preset(args, cwd)
    except (PresetError, OSError) as exc:
        return _fail(str(exc))
    if preset is None:
        return _fail("the preset was not trusted: nothing was run")
    env_model = env_model_for(preset)  # the context picks the same (Context.default_model)
    record, replay = getattr(args, "record", None), getattr(args, "replay", None)
    resume = getattr(args, "resume", None)
    replay_tools = bool(getattr(args, "replay_tools", False))
    if replay_tools and replay is None:
        return _fail("--replay-tools goes with --replay DIR")
    if preset.agent.model is None and env_model is None and replay is None:
        print(NO_MODEL.format(source=preset.source), file=sys.stderr)
        return 2
    from dsh.cli._tape import TapeUsageError, recorded_or_replayed, report_tape, unrecorded_rows

    try:
        with recorded_or_replayed(
            record=record,
            replay=replay,
            resume=resume,
            replay_tools=replay_tools,
            preset=preset,
            env_model=env_model,
        ) as tape:
            if tape is not None:
                env_model = env_model_for(preset)  # now the proxy's
                for line in unrecorded_rows(preset):
                    print(f"dsh: {strip_controls(line)}", file=sys.stderr)
            status = _run_with_view(args, preset, cwd, _model_notice(env_model, tape), tape)
            return status if tape is None else report_tape(tape, status, FINISHED_WITH_FAILURES)
    except TapeUsageError as exc:
        return _fail(str(exc))


def _model_notice(model: EnvModel | None, tape: TapeProxy | None) -> str | None:
    """The run's first line, ``dsh: model … at … (…)`` (None: the preset names the
    model); through a tape proxy, with the proxy's secret path token hidden."""
    if model is None:
        return None
    text = f"dsh: {model.describe()}"
    if tape is not None:
        secret = tape.proxy_url
        text = text.replace(secret, secret.rsplit("/", 1)[0] + "/[tape proxy]")
    return text


def _run_with_view(
    args: argparse.Namespace,
    preset: Preset,
    cwd: Path | None,
    model_notice: str | None,
    tape: TapeProxy | None = None,
) -> int:
    view = choose_view(json_lines=args.json)
    interrupt = Interrupt()
    try:
        with interrupt.installed():  # from here to the end: signals, see _interrupt
            return anyio.run(_run, args, preset, cwd, model_notice, view, interrupt, tape)
    finally:
        with contextlib.suppress(OSError):  # a terminal that hung up (SIGHUP)
            view.close()


def _trusted_preset(args: argparse.Namespace, cwd: Path | None) -> Preset | None:
    """The preset; a ``dsh.toml`` found in the working directory that is not trusted is
    shown and asked about on a terminal (``None``: the answer was no), refused without
    one (:class:`~dsh.core.plugins.UntrustedPresetError` says how to trust it)."""
    try:
        return resolve_preset(args.preset, cwd, trust=args.trust)
    except UntrustedPresetError as exc:
        if not sys.stdin.isatty():
            raise
        from dsh.cli._trust_command import ask_to_trust

        if not ask_to_trust(exc):
            return None
    return resolve_preset(args.preset, cwd)  # checked again: changed since shown, refused


async def _run(
    args: argparse.Namespace,
    preset: Preset,
    cwd: Path | None,
    model_notice: str | None,
    view: RunView,
    interrupt: Interrupt,
    tape: TapeProxy | None = None,
) -> int:
    outcome: TurnOutcome | None = None
    problems: str | None = None
    stopped: str | None = None
    """The budget cap the run was stopped at (None: not stopped by its budget)."""
    try:
        async with Context.open(preset, cwd=cwd, sessions_dir=args.sessions_dir) as ctx:
            if tape is not None:  # this process's agents reach the tape without the proxy hop
                from dsh.tape import attach

                attach(ctx, tape)
            if args.yes:
                ctx.permissions.allow_all = True
            elif sys.stdin.isatty() and sys.stderr.isatty():
                from dsh.cli._approve import TerminalApprover

                ctx.permissions.set_approver(TerminalApprover(view.suspended))
            lead = ctx.agents.create(label="lead")
            lift = None
            if args.budget is not None:
                lift = SubagentRuntime.of(ctx).budget_tree(lead, args.budget)
            view.on_output_closed = lambda: interrupt.stop(signal.SIGPIPE)
            unwatch = watch(ctx, lead, view)
            if model_notice is not None:
                view.notice(model_notice)
            with anyio.CancelScope() as scope, interrupt.catching(scope):
                await lead.run(args.task)
                await _settle_jobs(ctx, lead, view, detach=args.detach)
            outcome = _last_outcome(lead)
            meter = SubagentRuntime.of(ctx).budget_meter(lead) if args.budget else None
            if meter is not None and meter.tripped is not None:
                reason, stopped = meter.tripped
                if reason != "budget":  # (a usd cap on a model that reports no cost)
                    stopped = f"the budget could not be enforced: {stopped}"
            if outcome is not None and outcome.stop_reason == "completed":
                lead.session.flush()  # a turn/end the disk refused: saved now, or SessionError
            if interrupt.signal is not None:
                with contextlib.suppress(OSError):  # a terminal that hung up (SIGHUP)
                    view.interrupted(summarize(ctx, lead, outcome))
            else:
                view.finish(summarize(ctx, lead, outcome))
                problems = view.problems()
            if meter is not None:
                with contextlib.suppress(OSError):
                    view.notice(budget_line(meter))
            if lift is not None:
                lift()  # (its timer too)
            unwatch()
            view.close()
            if args.verbose:
                for event in lead.session.events:
                    print(f"{event.seq:4} {event.type:20} {dict(event.data)}", file=sys.stderr)
    except SessionError as exc:  # the disk refused the session (full): not a usage error
        view.close()
        _fail(str(exc))
        return 1
    except DshError as exc:
        view.close()
        return _fail(_explain(exc, preset))
    if interrupt.signal == signal.SIGPIPE:
        return interrupt.exit_status  # the reader went away (| head): nothing to say
    if interrupt.signal is not None:
        interrupt.announce()
        return interrupt.exit_status
    if outcome is None:
        return _fail("the lead ended no turn")
    if stopped is not None:
        print(f"dsh run: stopped by its budget: {strip_controls(stopped)}", file=sys.stderr)
        return 1
    if outcome.stop_reason != "completed":
        detail = f": {strip_controls(outcome.error)}" if outcome.error else ""
        print(f"dsh run: turn ended {outcome.stop_reason}{detail}", file=sys.stderr)
        return 1
    if problems is not None:
        print(f"dsh run: finished with failures: {problems}", file=sys.stderr)
        return FINISHED_WITH_FAILURES
    return 0


def _explain(exc: DshError, preset: Preset) -> str:
    text = str(exc)
    model = preset.agent.model
    if model is not None and f'no LLM adapter named "{model.adapter}"' in text:
        text = f"[agent.model] of {preset.source}: {text}"  # the core says how to fix it
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
