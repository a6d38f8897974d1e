"""Helpers that dsh's packages' tests share instead of copying them.

* Preset text: :data:`KEYED_PRESET`, :func:`keyed_preset`, :func:`keyed_rule` (the
  keyed model of ``dsh-testing-keyed-model``: replies by prompt), :func:`keyed_preset_file`
  (:data:`KEYED_PRESET` written to a file), :func:`delegating_parent`
  (a scripted parent that calls a subagent tool once), :func:`fake_openai_preset`,
  :func:`plugin_rows`,
  :data:`SPAWN_SUBAGENT_TOOL`, :func:`toml_value`.
* Processes: :func:`start_serving` (a server of the test's own that announces its URL),
  :func:`dsh_acp_child` (``dsh acp`` with an ACP client on its stdio).
* A parent that starts runs: :class:`ProviderRig` (``ProviderRig.scripted``: in a new
  scripted context), :func:`scripted_context`.
* Harnesses: :func:`keyed_conformance` (a child on the keyed model),
  :func:`in_process_conformance`, :func:`prompt_behaviour_conformance` and
  :func:`in_process_faults` (in-process providers), :func:`fault_sleep_installer`,
  :data:`FAST_GRACES`, :func:`until_asked`, :func:`child_process_case`.
* Whole test classes for an in-process provider (bound to a ``Test*`` name):
  :func:`in_process_conformance_suite`, :func:`in_process_fault_matrix`.
* Progress: :func:`progress_and_result` (a run's, to its end), :func:`progress_kinds`,
  :func:`assert_one_grandchild` (a delegation one level further down).
* Turns: :data:`ONE_TOOL_CALL_TURN`, :func:`call_then_echo`, :func:`tool_results`,
  :func:`result_text`, :func:`last_user_kind`.
"""

from dsh.testing._fixtures._acp_child import dsh_acp_child
from dsh.testing._fixtures._faults import FAST_GRACES, child_process_case, until_asked
from dsh.testing._fixtures._harnesses import keyed_conformance
from dsh.testing._fixtures._in_process import (
    fault_sleep_installer,
    in_process_conformance,
    in_process_faults,
    prompt_behaviour_conformance,
)
from dsh.testing._fixtures._presets import (
    FAIL_RULE,
    HANG_RULE,
    KEYED_PRESET,
    SCRIPTED_PRESET,
    SPAWN_SUBAGENT_TOOL,
    calling_replies,
    delegate_rule,
    delegating_parent,
    fake_openai_preset,
    keyed_preset,
    keyed_preset_file,
    keyed_rule,
    plugin_rows,
    toml_value,
)
from dsh.testing._fixtures._progress import (
    assert_one_grandchild,
    progress_and_result,
    progress_kinds,
)
from dsh.testing._fixtures._rig import ProviderRig, scripted_context
from dsh.testing._fixtures._serving import ServingProcess, start_serving
from dsh.testing._fixtures._suites import in_process_conformance_suite, in_process_fault_matrix
from dsh.testing._fixtures._turns import (
    ONE_TOOL_CALL_TURN,
    call_then_echo,
    last_user_kind,
    result_text,
    tool_results,
)

__all__ = [
    "FAIL_RULE",
    "FAST_GRACES",
    "HANG_RULE",
    "KEYED_PRESET",
    "ONE_TOOL_CALL_TURN",
    "SCRIPTED_PRESET",
    "SPAWN_SUBAGENT_TOOL",
    "ProviderRig",
    "ServingProcess",
    "assert_one_grandchild",
    "call_then_echo",
    "calling_replies",
    "child_process_case",
    "delegate_rule",
    "delegating_parent",
    "dsh_acp_child",
    "fake_openai_preset",
    "fault_sleep_installer",
    "in_process_conformance",
    "in_process_conformance_suite",
    "in_process_fault_matrix",
    "in_process_faults",
    "keyed_conformance",
    "keyed_preset",
    "keyed_preset_file",
    "keyed_rule",
    "last_user_kind",
    "plugin_rows",
    "progress_and_result",
    "progress_kinds",
    "prompt_behaviour_conformance",
    "result_text",
    "scripted_context",
    "start_serving",
    "toml_value",
    "tool_results",
    "until_asked",
]
