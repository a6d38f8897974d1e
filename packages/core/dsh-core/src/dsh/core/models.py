"""The LLM runtime beyond the front door: configs, the runtime and its bound models,
the stream an adapter yields, the environment's model (and :func:`require_model`,
the rule of ``dsh run`` for commands that serve a preset), and content blocks.

The names most code needs first are exported by :mod:`dsh.core` itself:
``ModelAdapter``, ``ModelRequest``, ``Usage``, ``Content``, ``text_of``,
``model_from_env`` and the scripted adapter (``ScriptedAdapter``, ``ScriptedReply``,
``ScriptedToolCall``). An adapter yields :data:`ModelStreamEvent` items:
:class:`TextDelta`, :class:`ToolCall`, then one :class:`ModelDone`.
"""

from dsh.core._content import ContentBlock, as_blocks, text_block
from dsh.core._env_model import EnvModel, NoModelError, require_model
from dsh.core._llm import (
    BoundModel,
    LLMRuntime,
    ModelConfig,
    ModelConfigError,
    ModelDone,
    ModelError,
    ModelStopReason,
    ModelStreamEvent,
    TextDelta,
    ToolCall,
    ToolSpec,
)
from dsh.core._scripted import ScriptedModelOptions

__all__ = [
    "BoundModel",
    "ContentBlock",
    "EnvModel",
    "LLMRuntime",
    "ModelConfig",
    "ModelConfigError",
    "ModelDone",
    "ModelError",
    "ModelStopReason",
    "ModelStreamEvent",
    "NoModelError",
    "ScriptedModelOptions",
    "TextDelta",
    "ToolCall",
    "ToolSpec",
    "as_blocks",
    "require_model",
    "text_block",
]
