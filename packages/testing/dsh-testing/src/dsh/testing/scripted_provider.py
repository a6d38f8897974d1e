"""A scripted subagent provider: the child is replaced, everything else is real.

Registry and tool tests use it with the real runtime and the real tool::

    provider = ScriptedProvider("scripted", reply="done", capabilities=ALL_START_CAPABILITIES)
    SubagentRuntime.of(ctx).register_provider(provider)

It answers with ``reply`` (or ``respond(request)``), a stop reason, an optional
structured value and diagnostic. A ``gate`` holds runs open until set; prompts
``"hang"`` and ``"fail"`` hold a run open until cancelled and fail it, which
is what the conformance suite drives. It records every request it started.

With the ``budget`` capability it enforces a request's budget the way an
out-of-process provider does, from the parent's side (the kit's ``RemoteBudget``):
a held run is stopped at its time cap (stop reason ``budget``), and the usage of
its answer counts against every budget above it.
"""

from dsh.testing._scripted_provider import (
    FAIL_PROMPT,
    HANG_PROMPT,
    ScriptedProvider,
    ScriptedProviderConfig,
    plugin,
)

__all__ = ["FAIL_PROMPT", "HANG_PROMPT", "ScriptedProvider", "ScriptedProviderConfig", "plugin"]
