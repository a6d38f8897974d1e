"""dsh session events -> chat-completions messages and tools (the conversion the
``openai`` adapter sends): :func:`chat_messages`, :func:`tool_definitions`,
:func:`plain` and the placeholder :data:`INTERRUPTED_RESULT`."""

from dsh.llm_openai._messages import INTERRUPTED_RESULT, chat_messages, plain, tool_definitions

__all__ = ["INTERRUPTED_RESULT", "chat_messages", "plain", "tool_definitions"]
