"""Reading a chat-completions stream: :class:`SSELines` (response lines -> event data),
:class:`ChunkAssembler` (chunk JSON -> dsh stream events), :data:`STOP_REASONS` and
:func:`error_detail`."""

from dsh.llm_openai._stream import STOP_REASONS, ChunkAssembler, SSELines, error_detail

__all__ = ["STOP_REASONS", "ChunkAssembler", "SSELines", "error_detail"]
