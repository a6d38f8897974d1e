"""``dsh run --record DIR`` / ``--replay DIR``: the run's model traffic through a tape
proxy (dsh-tape, imported only when one of them is given).

The run's model is the environment's (:func:`dsh.core.model_from_env`); the proxy
takes its place by ``OPENAI_BASE_URL`` — in the process's environment, so the lead,
its in-process children and every child process that is handed the model's variables
(``passthrough_env`` of an ``acp`` row, as the standard preset's) all reach it.
``DSH_TAPE_PROXY`` (:data:`dsh.subagent.kit.TAPE_PROXY_VARIABLE`) announces the proxy
to every provider's child process, and the codex and claude-code providers (in this
process or in a ``dsh acp`` child) route their product's model calls through it.
Recording forwards to the model the environment named, with its key; replaying needs
neither a server nor a key, and the model name comes from the tape's header unless
``OPENAI_MODEL`` is set.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from dsh.cli._safe_text import strip_controls
from dsh.core import Preset
from dsh.core.models import EnvModel
from dsh.subagent.kit import TAPE_PROXY_VARIABLE

if TYPE_CHECKING:
    from dsh.tape import TapeProxy

__all__ = ["TapeUsageError", "recorded_or_replayed", "report_tape", "unrecorded_rows"]

LABEL = "openai"
"""The proxy label of the run's (OpenAI-compatible) model API."""

_VARIABLES = ("OPENAI_BASE_URL", "OPENAI_MODEL", "OPENAI_API_KEY", TAPE_PROXY_VARIABLE)


class TapeUsageError(Exception):
    """``--record`` / ``--replay`` cannot be used as asked (the message says why)."""


@contextmanager
def recorded_or_replayed(
    *,
    record: str | None,
    replay: str | None,
    preset: Preset,
    env_model: EnvModel | None,
    resume: str | None = None,
    replay_tools: bool = False,
) -> Iterator[TapeProxy | None]:
    """A started :class:`~dsh.tape.TapeProxy` for the run (None without any option),
    with ``OPENAI_BASE_URL`` (and ``OPENAI_MODEL``, ``OPENAI_API_KEY``) pointed at it and
    ``DSH_TAPE_PROXY`` naming it in ``os.environ`` until the block ends. ``resume``
    replays while the run asks what the tape holds, then records (``mode="resume"``);
    ``replay_tools`` answers tool calls from the tape in a replay.
    :class:`TapeUsageError` when it cannot be."""
    if record is None and replay is None and resume is None:
        yield None
        return
    from dsh.tape import TAPE_FILE, TapeError, TapeProxy

    if preset.agent.model is not None:
        raise TapeUsageError(
            f"--record and --replay use the model the environment names (OPENAI_BASE_URL,"
            f" DEEPSEEK_API_KEY, OPENAI_API_KEY); {preset.source} names its own [agent.model]"
        )
    if resume is not None:
        _require_tape(resume, TAPE_FILE)
    saved = {name: os.environ.get(name) for name in _VARIABLES}
    try:
        if record is not None or resume is not None:
            if env_model is None:
                option = "--record" if record is not None else "--resume"
                raise TapeUsageError(f"{option}: the environment names no model to record")
            if record is not None:
                proxy, variables = _recorder(record, env_model, TapeProxy)
            else:
                assert resume is not None
                proxy, variables = _recorder(resume, env_model, TapeProxy, "resume")
        else:
            assert replay is not None
            proxy = TapeProxy(replay, "replay", replay_tools=replay_tools)
            variables = {}
        try:
            proxy.start()
        except TapeError as exc:
            raise TapeUsageError(str(exc)) from None
        try:
            if replay is not None:
                model = os.environ.get("OPENAI_MODEL") or proxy.header.get("model")
                variables = {"OPENAI_MODEL": str(model) if model else None, "OPENAI_API_KEY": None}
            _set_env({**variables, "OPENAI_BASE_URL": proxy.base_url(LABEL), **proxy.env()})
            yield proxy
        finally:
            proxy.close()
    finally:
        _set_env(saved)


def _require_tape(directory: str, name: str) -> None:
    """``--resume DIR`` goes on from a tape: :class:`TapeUsageError` when ``DIR`` holds
    none (a fresh recording is ``--record``'s job)."""
    path = Path(directory) / name
    if not path.is_file():
        raise TapeUsageError(
            f"--resume {directory}: there is no tape to resume ({path} does not exist);"
            f" to start a new recording there, use --record {directory}"
        )


def unrecorded_rows(preset: Preset) -> list[str]:
    """What in ``preset`` runs children whose model calls would miss the tape: ``acp``
    rows that do not hand ``OPENAI_BASE_URL`` on (``passthrough_env`` or ``env``), each
    a line for a notice. (The codex and claude-code rows route their children through
    the tape by ``DSH_TAPE_PROXY``.)"""
    found: list[str] = []
    for index, row in enumerate(preset.plugin):
        if row.disabled:
            continue
        if row.name == "dsh-subagent-acp":
            passed = set(row.config.get("passthrough_env") or ()) | set(row.config.get("env") or {})
            if "OPENAI_BASE_URL" not in passed:
                found.append(
                    f"{row.describe(index)} does not pass OPENAI_BASE_URL to its children"
                    " (passthrough_env): their model calls are not on the tape"
                )
    return found


def _recorder(
    directory: str,
    env_model: EnvModel,
    proxy_type: type[TapeProxy],
    mode: Literal["record", "resume"] = "record",
) -> tuple[TapeProxy, dict[str, str | None]]:
    options: Mapping[str, Any] = env_model.config.options
    model = env_model.config.model
    key_env = str(options.get("api_key_env") or "")
    key = os.environ.get(key_env) if key_env else None
    upstream = str(options["base_url"])
    proxy = proxy_type(directory, mode, {LABEL: upstream}, meta={"model": model})
    return proxy, {"OPENAI_MODEL": model, "OPENAI_API_KEY": key or None}


def _set_env(values: Mapping[str, str | None]) -> None:
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def report_tape(proxy: TapeProxy, status: int, failed: int) -> int:
    """After the run: say what the tape did on stderr; a divergence turns ``status``
    (unless the run was interrupted) into ``failed``."""
    where = proxy.tape_path
    tools = f" and {proxy.tools_recorded} tool calls" if proxy.tools_recorded else ""
    if proxy.mode == "record":
        print(f"dsh: recorded {proxy.recorded} model calls{tools} into {where}", file=sys.stderr)
        return status
    if proxy.mode == "resume":
        print(
            f"dsh: resumed from {where}: {proxy.replayed} model calls and"
            f" {proxy.tools.answered} tool calls answered from the tape, then"
            f" {proxy.recorded} model calls{tools} recorded",
            file=sys.stderr,
        )
        return status
    if proxy.divergence is not None:
        text = strip_controls(proxy.divergence.describe())
        print(f"dsh run: {text}", file=sys.stderr)
        return status if status >= 128 else failed
    left = f"; {proxy.remaining} recorded calls were not asked for" if proxy.remaining else ""
    if proxy.tools.answered:
        verb = "answered" if proxy.replay_tools else "checked"
        left = f" ({verb} {proxy.tools.answered} tool calls from it){left}"
    print(f"dsh: replayed {proxy.replayed} model calls from {where}{left}", file=sys.stderr)
    return status
