"""dsh.subagent_in_process_driver — the driver shared by the spawn and fork providers.

:class:`InProcessProvider` runs a child :class:`~dsh.core.Agent` in the parent's
context and honours all five start capabilities (``output_schema``,
``depth_limit``, ``tool_filter``, ``persona``, ``budget``: the child's meter sees
every model call and tool call, and a reached cap stops it like a cancel).
"""

from dsh.subagent_in_process_driver._driver import (
    DELEGATION_SECTION,
    DESCRIPTOR_EVENT,
    InProcessProvider,
)
from dsh.subagent_in_process_driver._options import InProcessAgentOptions, parse_agent_options
from dsh.subagent_in_process_driver._plugin import (
    InProcessProviderConfig,
    ProviderFactory,
    provider_factory,
    provider_plugin,
)
from dsh.subagent_in_process_driver._structured import (
    STRUCTURED_OUTPUT_TOOL,
    StructuredCapture,
    structured_output_tool,
)

__all__ = [
    "DELEGATION_SECTION",
    "DESCRIPTOR_EVENT",
    "STRUCTURED_OUTPUT_TOOL",
    "InProcessAgentOptions",
    "InProcessProvider",
    "InProcessProviderConfig",
    "ProviderFactory",
    "StructuredCapture",
    "parse_agent_options",
    "provider_factory",
    "provider_plugin",
    "structured_output_tool",
]
