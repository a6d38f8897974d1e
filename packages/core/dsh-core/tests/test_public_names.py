"""dsh.core's public names: a short front door, topic modules for the rest, and the
names that were public before still importable (with a warning naming the new home)."""

from __future__ import annotations

import importlib
import re
import warnings

import pytest

import dsh.core

TOPICS = ("agents", "jobs", "lifecycle", "models", "permissions", "plugins", "sessions", "tracing")

# Every name dsh.core.__all__ held before the topic modules (114): each must stay
# importable, from dsh.core itself or from its one topic module.
COMPATIBILITY = frozenset(
    {
        "ANY",
        "MAX_RUNNING_PER_OWNER",
        "NO_TRACING",
        "PERMISSION_REFUSED",
        "PROTECTED_NAMES",
        "SANDBOX_ENV",
        "STOP_SIGNALS",
        "TRACING_SWITCH_ENV",
        "AbortSignal",
        "Aborted",
        "Agent",
        "AgentDefaults",
        "AgentObserver",
        "AgentRegistry",
        "AgentTools",
        "Approver",
        "AsyncDisposer",
        "BoundModel",
        "BusEvent",
        "ConfigError",
        "Content",
        "ContentBlock",
        "Context",
        "Disposer",
        "DshError",
        "EffectScope",
        "EnvModel",
        "Event",
        "EventBus",
        "Job",
        "JobError",
        "JobOutcome",
        "JobRegistry",
        "JobStatus",
        "LLMRuntime",
        "LoadedPlugin",
        "LoadedSession",
        "ModelAdapter",
        "ModelConfig",
        "ModelConfigError",
        "ModelDone",
        "ModelError",
        "ModelRequest",
        "ModelStopReason",
        "ModelStreamEvent",
        "NoConfig",
        "NoModelError",
        "PermissionDecision",
        "PermissionPolicy",
        "PermissionRequest",
        "Permissions",
        "PermissionsConfig",
        "Plugin",
        "PluginError",
        "PluginHost",
        "PluginRow",
        "Preset",
        "PresetError",
        "PromptSections",
        "SandboxConfig",
        "SandboxError",
        "SandboxMode",
        "SandboxPolicy",
        "ScriptedAdapter",
        "ScriptedModelOptions",
        "ScriptedReply",
        "ScriptedToolCall",
        "Session",
        "SessionError",
        "SessionHeader",
        "SessionStore",
        "StopReason",
        "TextDelta",
        "Tool",
        "ToolCall",
        "ToolContext",
        "ToolError",
        "ToolRegistry",
        "ToolResult",
        "ToolSpec",
        "ToolView",
        "TornTail",
        "TracedCall",
        "Tracing",
        "TrustedPreset",
        "TurnBlocked",
        "TurnOutcome",
        "UntrustedPresetError",
        "Usage",
        "as_blocks",
        "check_trust",
        "describe_job",
        "find_preset",
        "install_tracing",
        "last_output",
        "load_named_preset",
        "load_preset",
        "model_from_env",
        "named_presets",
        "new_session_id",
        "on_stop_signals",
        "parse_preset",
        "preset_reach",
        "redact_urls",
        "revoke_trust",
        "text_block",
        "text_of",
        "tool",
        "tracing_switched_on",
        "trust_preset",
        "trust_store_path",
        "trusted_presets",
        "tune_gc",
        "validation_problems",
    }
)


def ruff_order(names: list[str]) -> list[str]:
    """``names`` as ruff sorts an ``__all__``: constants, then classes, then the rest."""
    return sorted(names, key=lambda n: (0 if n.isupper() else 1 if n[0].isupper() else 2, n))


def topic_exports() -> dict[str, str]:
    """Each topic module's name -> the topic module (fails on a name exported twice)."""
    home: dict[str, str] = {}
    for topic in TOPICS:
        module = importlib.import_module(f"dsh.core.{topic}")
        assert module.__doc__, f"{module.__name__} has no docstring"
        for name in module.__all__:
            assert name not in home, f"{name} is exported by {home[name]} and {topic}"
            home[name] = module.__name__
    return home


def test_the_front_door_is_short_and_sorted() -> None:
    assert len(COMPATIBILITY) == 114
    assert len(dsh.core.__all__) <= 40
    assert dsh.core.__all__ == ruff_order(dsh.core.__all__)
    assert len(set(dsh.core.__all__)) == len(dsh.core.__all__)
    assert dir(dsh.core) == list(dsh.core.__all__)
    for name in dsh.core.__all__:
        getattr(dsh.core, name)


def test_every_topic_name_resolves_and_has_one_home() -> None:
    home = topic_exports()
    assert not set(home) & set(dsh.core.__all__), "a name is both in dsh.core and a topic"
    for name, module in home.items():
        assert hasattr(importlib.import_module(module), name), f"{module}.{name}"
    for topic in TOPICS:
        exported = importlib.import_module(f"dsh.core.{topic}").__all__
        assert exported == ruff_order(exported), f"dsh.core.{topic}.__all__ is not sorted"


def test_every_name_public_before_is_still_public() -> None:
    public = set(dsh.core.__all__) | set(topic_exports())
    assert public >= COMPATIBILITY, sorted(COMPATIBILITY - public)


def test_an_old_import_warns_and_names_the_new_one() -> None:
    home = topic_exports()
    for name in sorted(COMPATIBILITY - set(dsh.core.__all__)):
        new = f"from {home[name]} import {name}"
        with pytest.warns(DeprecationWarning, match=re.escape(new)):
            value = getattr(dsh.core, name)
        assert value is getattr(importlib.import_module(home[name]), name)
    with pytest.warns(DeprecationWarning, match=r"from dsh\.core\.models import ModelDone"):
        from dsh.core import ModelDone  # type: ignore[attr-defined]  # noqa: F401


def test_a_front_door_name_does_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from dsh.core import Context, ModelRequest  # noqa: F401


def test_an_unknown_name_raises_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchName"):
        getattr(dsh.core, "NoSuchName")  # noqa: B009
    with pytest.raises(ImportError):
        from dsh.core import NoSuchName  # type: ignore[attr-defined]  # noqa: F401
