"""Turning a settled run into the tool result the parent model reads."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from dsh.core import ToolResult
from dsh.subagent import SubagentResult, SubagentRun

__all__ = ["HEADLINES", "Collected", "collect", "headline_for", "tool_result_for"]

HEADLINES = {
    "aborted": "subagent run was cancelled",
    "error": "subagent run failed",
    "max-tokens": "subagent run hit its token limit before finishing",
    "refusal": "subagent declined the task",
    "budget": "subagent run ran out of budget before finishing (it was stopped at its cap)",
}


@dataclass(slots=True)
class Collected:
    """A finished run: its result, or why it could not be read; and any teardown failure.

    (Not frozen: it lives only from a run's end to its tool result, one per delegation,
    and on Python 3.11 a frozen dataclass's ``__init__`` costs about four times a plain
    one's: one ``object.__setattr__`` call per field.)"""

    run_id: str
    result: SubagentResult | None
    result_error: BaseException | None = None
    dispose_error: BaseException | None = None

    def tool_result(self) -> ToolResult:
        """The tool result the parent model reads."""
        return tool_result_for(
            self.result,
            result_error=self.result_error,
            dispose_error=self.dispose_error,
            run_id=self.run_id,
        )


async def collect(run: SubagentRun) -> Collected:
    """Await ``run``'s result and dispose the run on every path, keeping both failures."""
    result: SubagentResult | None = None
    result_error: BaseException | None = None
    dispose_error: BaseException | None = None
    try:
        result = await run.result
    except Exception as exc:
        result_error = exc
    finally:
        try:
            await run.dispose()
        except Exception as exc:
            dispose_error = exc
    return Collected(run.id, result, result_error, dispose_error)


def headline_for(stop_reason: str) -> str:
    """The first line of the error result for a non-completed stop reason."""
    return HEADLINES.get(stop_reason, f"subagent run ended abnormally ({stop_reason})")


def tool_result_for(
    result: SubagentResult | None,
    *,
    result_error: BaseException | None = None,
    dispose_error: BaseException | None = None,
    run_id: str | None = None,
) -> ToolResult:
    """Map a run's outcome (and any infrastructure failures) to a tool result."""
    data: dict[str, Any] = {"run_id": run_id}
    if result is not None:
        data["stop_reason"] = result.stop_reason
        if result.usage is not None:
            # (what dict(usage) gives, without the Mapping protocol's dozen calls)
            data["usage"] = result.usage.to_json()
        if result.structured is not None:
            data["structured"] = result.structured
    if result_error is not None or result is None:
        lines = [
            "subagent run failed",
            f"Diagnostic: the run's result could not be read: {_describe(result_error)}",
        ]
        if dispose_error is not None:
            lines.append(f"Cleanup also failed: {_describe(dispose_error)}")
        return ToolResult("\n".join(lines), is_error=True, data=data)
    if result.stop_reason == "completed":
        text = result.output or "(the subagent finished without any output)"
        if result.structured is not None:
            text = json.dumps(result.structured, ensure_ascii=False)
        if dispose_error is not None:
            text += f"\n\nWarning: cleanup of the subagent failed: {_describe(dispose_error)}"
            return ToolResult(text, True, data)
        return ToolResult(text, False, data)  # (positional: no keyword dict per call)
    lines = [headline_for(result.stop_reason)]
    if result.diagnostic:
        lines.append(f"Diagnostic: {result.diagnostic}")
    if result.output:
        lines.append(f"Partial output before the run ended: {result.output}")
    if dispose_error is not None:
        lines.append(f"Cleanup also failed: {_describe(dispose_error)}")
    return ToolResult("\n".join(lines), is_error=True, data=data)


def _describe(error: BaseException | None) -> str:
    if error is None:
        return "no result"
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
