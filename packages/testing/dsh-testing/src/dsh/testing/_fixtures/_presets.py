"""Preset text that many packages' tests write: the keyed model, a delegating parent."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "DONE_REPLY",
    "FAIL_RULE",
    "HANG_RULE",
    "KEYED_PRESET",
    "SCRIPTED_PRESET",
    "SPAWN_SUBAGENT_TOOL",
    "calling_replies",
    "delegate_rule",
    "delegating_parent",
    "fake_openai_preset",
    "keyed_preset",
    "keyed_preset_file",
    "keyed_rule",
    "plugin_rows",
    "toml_value",
]

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")

SCRIPTED_PRESET = '[agent.model]\nadapter = "scripted"\n'
"""A preset whose agents run on the core ``scripted`` model."""


def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else json.dumps(key)


def toml_value(value: Any) -> str:
    """``value`` (str, number, bool, list, mapping) as a TOML inline value."""
    if isinstance(value, Mapping):
        items = (f"{_key(k)} = {toml_value(v)}" for k, v in value.items())
        return "{ " + ", ".join(items) + " }"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(value)


def plugin_rows(*plugins: str | tuple[str, Mapping[str, Any]]) -> str:
    """``[[plugin]]`` rows: a name, or ``(name, config)``."""
    rows = []
    for plugin in plugins:
        name, config = (plugin, None) if isinstance(plugin, str) else plugin
        row = f"\n[[plugin]]\nname = {json.dumps(name)}\n"
        rows.append(row if config is None else f"{row}config = {toml_value(config)}\n")
    return "".join(rows)


SPAWN_SUBAGENT_TOOL = plugin_rows(
    "dsh-subagent-spawn-in-process",
    ("dsh-tool-subagent", {"provider": "spawn", "tool_name": "subagent", "max_depth": 3}),
)
"""The ``spawn`` provider and a ``subagent`` tool on it (``max_depth = 3``)."""


def keyed_rule(contains: str, *replies: Mapping[str, Any]) -> str:
    """One ``[[agent.model.options.rules]]`` table of the keyed model: when the turn's
    user message contains ``contains``, ``replies`` (by step)."""
    return (
        f"\n[[agent.model.options.rules]]\ncontains = {json.dumps(contains)}\n"
        f"replies = {toml_value(list(replies))}\n"
    )


HANG_RULE = keyed_rule("hang", {"hang": True})
"""A prompt containing "hang" hangs until cancelled."""
FAIL_RULE = keyed_rule("fail", {"error": "the scripted model fails on purpose"})
"""A prompt containing "fail" fails the turn."""
DONE_REPLY: Mapping[str, Any] = {"text": "Done: {prompt}", "chunks": 3}
"""The keyed presets' default reply: ``Done: <prompt>`` in three chunks."""


def calling_replies(
    tool: str, prompt: str, *, then: str, description: str, text: str | None = None
) -> list[dict[str, Any]]:
    """Two scripted replies: call ``tool`` with ``description`` and ``prompt`` (saying
    ``text`` with the call, if given), then say ``then`` (``{tool_results}``: what the
    tool returned)."""
    call: dict[str, Any] = {
        "tool_calls": [{"name": tool, "arguments": {"description": description, "prompt": prompt}}]
    }
    if text is not None:
        call = {"text": text, **call}
    return [call, {"text": then}]


def delegate_rule(prompt: str, *, tool: str = "subagent", description: str = "inner") -> str:
    """A prompt containing "delegate": the model says "Delegating." and calls ``tool``
    with ``prompt``, then answers ``child done: <the tool's result>``."""
    return keyed_rule(
        "delegate",
        *calling_replies(
            tool,
            prompt,
            then="child done: {tool_results}",
            description=description,
            text="Delegating.",
        ),
    )


def keyed_preset(
    *rules: str,
    default: Sequence[Mapping[str, Any]] | None = (DONE_REPLY,),
    plugins: str = "",
) -> str:
    """A preset on the keyed model (plugin ``dsh-testing-keyed-model``): ``rules``
    (:func:`keyed_rule`) in order, else the ``default`` replies; ``plugins``
    (:func:`plugin_rows`) are loaded after the keyed model's plugin. More rules may be
    appended to the text."""
    options = "" if default is None else f"default = {toml_value(list(default))}\n"
    return (
        plugin_rows("dsh-testing-keyed-model")
        + plugins
        + f'\n[agent.model]\nadapter = "keyed"\n[agent.model.options]\n{options}'
        + "".join(rules)
    )


KEYED_PRESET = keyed_preset(HANG_RULE, FAIL_RULE)
"""The keyed model: "hang" hangs until cancelled, "fail" fails, else ``Done: <prompt>``
in three chunks."""


def keyed_preset_file(path: Path) -> Path:
    """Write :data:`KEYED_PRESET` to ``path`` (a child's or a server's preset file);
    returns ``path``."""
    path.write_text(KEYED_PRESET, encoding="utf-8")
    return path


def delegating_parent(
    prompt: str, *, then: str, tool: str = "subagent", description: str = "child"
) -> str:
    """A scripted parent model (the ``[agent.model]`` table) whose first reply calls
    ``tool`` with ``prompt`` and whose second says ``then`` (``{tool_results}``: what
    the tool returned)."""
    replies = calling_replies(tool, prompt, then=then, description=description)
    return f"{SCRIPTED_PRESET}[agent.model.options]\nreplies = {toml_value(replies)}\n"


def fake_openai_preset(base_url: str, *plugins: str | tuple[str, Mapping[str, Any]]) -> str:
    """A preset on the ``openai`` adapter (dsh-llm-openai) pointed at a fake model server
    at ``base_url`` (model ``fake-model``, no API key), loading ``plugins`` too."""
    options = toml_value({"base_url": base_url, "api_key_env": ""})
    return (
        plugin_rows("dsh-llm-openai", *plugins)
        + f'\n[agent.model]\nadapter = "openai"\nmodel = "fake-model"\noptions = {options}\n'
    )
