"""The child-scoped ``structured_output`` tool for requests with an ``output_schema``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dsh.core import Tool, ToolContext, ToolResult

__all__ = ["STRUCTURED_OUTPUT_TOOL", "StructuredCapture", "structured_output_tool"]

STRUCTURED_OUTPUT_TOOL = "structured_output"

_MAX_ERRORS = 5


class StructuredCapture:
    """Holds the one captured value."""

    __slots__ = ("captured", "value")

    def __init__(self) -> None:
        self.captured = False
        self.value: Any = None


def structured_output_tool(schema: Mapping[str, Any], capture: StructuredCapture) -> Tool:
    """A tool whose arguments must validate against ``schema``.

    Invalid arguments come back to the model as a tool error listing what is wrong,
    so it can retry. The first valid call captures the value and refuses every
    later tool call of the child.
    """
    from jsonschema import validators

    validator_class = validators.validator_for(schema)
    validator = validator_class(dict(schema), format_checker=validator_class.FORMAT_CHECKER)

    def parse(arguments: Mapping[str, Any]) -> dict[str, Any]:
        errors = sorted(validator.iter_errors(dict(arguments)), key=lambda e: list(e.absolute_path))
        if errors:
            lines = [
                f"{'/'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}"
                for e in errors[:_MAX_ERRORS]
            ]
            more = len(errors) - _MAX_ERRORS
            if more > 0:
                lines.append(f"... and {more} more")
            raise ValueError("does not match the output schema: " + "; ".join(lines))
        return dict(arguments)

    async def run(value: dict[str, Any], tctx: ToolContext) -> ToolResult:
        if capture.captured:
            return ToolResult("structured output was already recorded", is_error=True)
        capture.captured = True
        capture.value = value
        tctx.agent.tools.refuse(
            "structured output is recorded; no further tool calls are allowed — finish now"
        )
        return ToolResult("Structured output recorded. Finish with a one-line summary.")

    return Tool(
        STRUCTURED_OUTPUT_TOOL,
        "Deliver your final result as structured data matching the required schema."
        " Call it exactly once, when you are done; invalid data is returned as an error to fix.",
        dict(schema),
        run,
        parse=parse,
        concurrency_safe=False,
    )
