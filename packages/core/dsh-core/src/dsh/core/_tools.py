"""Tools: typed parameters, a global registry, per-agent scoped tools, restriction.

A :class:`Tool` has a name, a description, a JSON Schema for its input (from a
pydantic model, or given directly), a parser that validates raw arguments, and
an async ``run``. :meth:`ToolRegistry.restrict` returns a view that governs the
schema the model sees, lookup and execution together: a tool outside the view
cannot be seen or run, even when the model asks for it by name.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, cast

from pydantic import BaseModel, ValidationError

from dsh.core._content import Content, as_blocks
from dsh.core._effects import Disposer
from dsh.core._errors import DshError
from dsh.core._llm import ToolSpec
from dsh.core._permission_config import (
    PermissionDecision,
    PermissionPolicy,
    default_title,
    visible_line,
)
from dsh.core._validation import validation_problems

__all__ = [
    "AgentTools",
    "CallContext",
    "Tool",
    "ToolError",
    "ToolRegistry",
    "ToolResult",
    "ToolView",
    "TurnBlocked",
    "tool",
]

P = TypeVar("P", bound=BaseModel)


class ToolError(DshError):
    """A tool registration or restriction was invalid."""


class TurnBlocked(DshError):
    """Raised by a tool to end the turn with stop reason ``blocked`` (e.g. approval needed)."""


@dataclass(slots=True)
class ToolResult:
    """What a tool returns to the model. ``is_error`` marks a failed call."""

    content: Content
    is_error: bool = False
    data: Any = None
    """Structured value kept in the session next to the content (not shown to the model)."""

    def blocks(self) -> list[dict[str, Any]]:
        """The content as blocks."""
        return as_blocks(self.content)


class CallContext(Protocol):
    """What :meth:`Tool.invoke` needs of a call's :class:`~dsh.core.ToolContext` (which
    is defined with the agent it names, above this module)."""

    @property
    def call_id(self) -> str:
        """The model's id of the call."""

    async def check_permission(self, tool: Tool, arguments: Any) -> PermissionDecision:
        """Whether the agent may run the governed ``tool`` with ``arguments`` (parsed)."""


ToolRun = Callable[[Any, Any], Awaitable[ToolResult | Content]]
"""``run(arguments, tctx)``: the parsed arguments and the call's
:class:`~dsh.core.ToolContext` (``Any`` here: tools sit below the agent, which
makes the contexts)."""


@dataclass(eq=False, slots=True)
class Tool:
    """A tool the model can call.

    Prefer the :func:`tool` decorator for pydantic-typed tools; construct directly
    for tools whose input schema is given as JSON Schema with a custom ``parse``.
    """

    name: str
    description: str
    input_schema: Mapping[str, Any]
    run: ToolRun
    parse: Callable[[Mapping[str, Any]], Any] = dict
    concurrency_safe: bool = True
    """May run at the same time as other safe tool calls of the same step."""
    permission: PermissionPolicy | None = None
    """The tool's default permission policy (``allow`` / ``ask`` / ``deny``; the
    preset's ``[permissions]`` overrides it). None: not governed, always runs."""
    kind: str = "other"
    """What the tool does, in ACP's words (read, edit, delete, move, search, execute,
    think, fetch, other): clients show it, approvers weigh it."""
    title: Callable[[Any], str] | None = None
    """One line describing a call for a human (parsed arguments in), e.g.
    ``Run `ls -la```; default: the name and the arguments."""
    extensions: Mapping[str, Any] = field(default_factory=dict)
    """Named seams beyond :attr:`run` that other code reaches through the registry
    (e.g. the shell tool's ``terminal``, a command started in the background: see
    :mod:`dsh.subprocess`). The model never sees them."""
    spec: ToolSpec = field(init=False)

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "a").replace("-", "a").isalnum():
            raise ToolError(
                f"invalid tool name {self.name!r}: use letters, digits, '_' and '-' only"
            )
        self.spec = ToolSpec(self.name, self.description, self.input_schema)

    @classmethod
    def from_model(
        cls,
        name: str,
        description: str,
        parameters: type[P],
        run: Callable[[P, Any], Awaitable[ToolResult | Content]],
        *,
        concurrency_safe: bool = True,
        permission: PermissionPolicy | None = None,
        kind: str = "other",
        title: Callable[[P], str] | None = None,
        extensions: Mapping[str, Any] | None = None,
    ) -> Tool:
        """A tool whose input is validated by the pydantic model ``parameters``."""
        schema = parameters.model_json_schema()
        schema.pop("title", None)
        return cls(
            name,
            description,
            schema,
            run,
            parse=parameters.model_validate,
            concurrency_safe=concurrency_safe,
            permission=permission,
            kind=kind,
            title=title,
            extensions=dict(extensions or {}),
        )

    def title_for(self, arguments: Any) -> str:
        """The one-line description of a call with ``arguments`` (parsed), its control
        characters shown as escapes (``\\x1b``, ``\\r``, ``\\n``), never raw."""
        if self.title is not None:
            try:
                return visible_line(self.title(arguments))
            except Exception:
                pass
        return visible_line(default_title(self.name, arguments))

    async def invoke(self, arguments: Mapping[str, Any], tctx: CallContext) -> ToolResult:
        """Validate ``arguments`` and run; invalid input becomes an error result."""
        try:
            parsed = self.parse(arguments)
        except ValidationError as exc:
            return ToolResult(_validation_text(self.name, exc), is_error=True)
        except (TypeError, ValueError) as exc:
            return ToolResult(f"invalid arguments for tool {self.name}: {exc}", is_error=True)
        if self.permission is not None:
            decision = await tctx.check_permission(self, parsed)
            if not decision.allowed:
                return ToolResult(decision.reason, is_error=True, data={"permission": "denied"})
        outcome = await self.run(parsed, tctx)
        if isinstance(outcome, ToolResult):
            return outcome
        return ToolResult(outcome)


def _validation_text(name: str, exc: ValidationError) -> str:
    return f"invalid arguments for tool {name}: {validation_problems(exc)}"


def tool(
    name: str, description: str, *, concurrency_safe: bool = True
) -> Callable[[Callable[[P, Any], Awaitable[ToolResult | Content]]], Tool]:
    """Decorator: make a :class:`Tool` from ``async def f(args: Model, tctx)``.

    The parameter model is taken from the first parameter's annotation.
    """

    def wrap(fn: Callable[[P, Any], Awaitable[ToolResult | Content]]) -> Tool:
        hints = inspect.get_annotations(fn, eval_str=True)
        params = list(inspect.signature(fn).parameters)
        model = hints.get(params[0]) if params else None
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise ToolError(
                f"tool {name!r}: first parameter must be annotated with a pydantic model"
            )
        run = cast("Callable[[BaseModel, Any], Awaitable[ToolResult | Content]]", fn)
        return Tool.from_model(name, description, model, run, concurrency_safe=concurrency_safe)

    return wrap


class ToolRegistry:
    """The global tools of a context (``ctx.tools``)."""

    __slots__ = ("_tools", "version")

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}
        self.version = 0
        """Bumped on every change (lets views cache their specs)."""

    def register(self, tool: Tool) -> Disposer:
        """Add ``tool``; a name clash raises :class:`ToolError`. Returns a disposer."""
        if tool.name in self._tools:
            raise ToolError(f'a tool named "{tool.name}" is already registered')
        self._tools[tool.name] = tool
        self.version += 1

        def remove() -> None:
            if self._tools.get(tool.name) is tool:
                del self._tools[tool.name]
                self.version += 1

        return remove

    def get(self, name: str) -> Tool | None:
        """The tool named ``name``, or None."""
        return self._tools.get(name)

    def names(self) -> list[str]:
        """Names of all registered tools, in registration order."""
        return list(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def restrict(
        self, allow: Iterable[str] | None = None, deny: Iterable[str] | None = None
    ) -> ToolView:
        """A view of this registry: only ``allow`` (if given), minus ``deny``.

        Allow applies before deny. Names that are not registered fail loud, listing
        the known ones. ``allow=[]`` hides every tool. A deny-only view admits tools
        registered later.
        """
        allow_set = None if allow is None else frozenset(allow)
        deny_set = frozenset(deny or ())
        unknown = sorted(((allow_set or frozenset()) | deny_set) - self._tools.keys())
        if unknown:
            known = ", ".join(self._tools) or "none"
            raise ToolError(
                f"tool_filter names unknown tools: {', '.join(unknown)} (known tools: {known})"
            )
        return ToolView(self, allow_set, deny_set)

    def view(self) -> ToolView:
        """An unrestricted view."""
        return ToolView(self, None, frozenset())


class ToolView:
    """A filtered, live view of a :class:`ToolRegistry`."""

    __slots__ = ("_allow", "_cache", "_cache_version", "_deny", "_governed", "registry")

    def __init__(
        self, registry: ToolRegistry, allow: frozenset[str] | None, deny: frozenset[str]
    ) -> None:
        self.registry = registry
        self._allow = allow
        self._deny = deny
        self._cache: tuple[ToolSpec, ...] = ()
        self._governed: tuple[Tool, ...] = ()
        """The admitted tools that have a permission policy (cached with the specs)."""
        self._cache_version = -1

    @property
    def allow(self) -> frozenset[str] | None:
        """The allow-list (None: everything not denied)."""
        return self._allow

    @property
    def deny(self) -> frozenset[str]:
        """The deny-list."""
        return self._deny

    def narrow(
        self, allow: Iterable[str] | None = None, deny: Iterable[str] | None = None
    ) -> ToolView:
        """A view no wider than this one: allow lists intersect, deny lists add up.

        Names unknown to the registry fail loud, as in :meth:`ToolRegistry.restrict`.
        """
        checked = self.registry.restrict(allow, deny)
        if self._allow is None:
            merged_allow = checked._allow
        elif checked._allow is None:
            merged_allow = self._allow
        else:
            merged_allow = self._allow & checked._allow
        return ToolView(self.registry, merged_allow, self._deny | checked._deny)

    def admits(self, name: str) -> bool:
        """True if the view lets ``name`` through (whether or not it is registered)."""
        if self._allow is not None and name not in self._allow:
            return False
        return name not in self._deny

    def get(self, name: str) -> Tool | None:
        """The tool if registered and admitted."""
        return self.registry.get(name) if self.admits(name) else None

    def names(self) -> list[str]:
        """Admitted tool names."""
        return [n for n in self.registry.names() if self.admits(n)]

    def specs(self) -> tuple[ToolSpec, ...]:
        """Specs of the admitted tools (cached until the registry changes)."""
        if self._cache_version != self.registry.version:
            self._refresh()
        return self._cache

    def _refresh(self) -> None:
        admitted = [t for t in self.registry._tools.values() if self.admits(t.name)]
        self._cache = tuple(t.spec for t in admitted)
        self._governed = tuple(t for t in admitted if t.permission is not None)
        self._cache_version = self.registry.version


class AgentTools:
    """The tools one agent can use: its scoped tools, then the global view.

    Scoped tools (e.g. a child's ``structured_output``) belong to this agent alone.
    """

    __slots__ = ("_governed", "_scoped", "_specs", "_specs_key", "refusal", "view")

    def __init__(self, view: ToolView) -> None:
        self.view = view
        self.refusal: str | None = None
        """When set, every tool call is refused with this reason and no tool is shown."""
        self._scoped: dict[str, Tool] | None = None
        self._specs: tuple[ToolSpec, ...] = ()
        self._governed: tuple[Tool, ...] = ()
        self._specs_key = -1
        """The registry version the cached specs are of (-1: stale)."""

    def add(self, tool: Tool) -> Disposer:
        """Give this agent a tool of its own; a clash with a visible tool raises."""
        if self._scoped is None:
            self._scoped = {}
        if tool.name in self._scoped or self.view.get(tool.name) is not None:
            raise ToolError(f'a tool named "{tool.name}" is already visible to this agent')
        self._scoped[tool.name] = tool
        self._specs_key = -1

        def remove() -> None:
            if self._scoped is not None and self._scoped.get(tool.name) is tool:
                del self._scoped[tool.name]
                self._specs_key = -1

        return remove

    def get(self, name: str) -> Tool | None:
        """The tool this agent may run under ``name``, or None."""
        if self._scoped is not None:
            found = self._scoped.get(name)
            if found is not None:
                return found
        return self.view.get(name)

    def names(self) -> list[str]:
        """Every tool name this agent may use."""
        return [*(self._scoped or ()), *self.view.names()]

    def refuse(self, reason: str) -> None:
        """From now on refuse every tool call with ``reason`` (and show no tools)."""
        self.refusal = reason

    def specs(self) -> Sequence[ToolSpec]:
        """What the model is shown."""
        if self.refusal is not None:
            return ()
        version = self.view.registry.version  # (scoped changes reset _specs_key themselves)
        if version != self._specs_key:
            self._refresh(version)
        return self._specs

    def governed(self) -> tuple[Tool, ...]:
        """The tools behind :meth:`specs` that have a permission policy (cached with
        the specs): what :meth:`Permissions.offered` weighs. Empty for most agents, so
        offering ungoverned tools costs no policy look-up."""
        return self._governed if self.specs() else ()  # specs() brings the caches up to date

    def _refresh(self, version: int) -> None:
        view = self.view
        if not self._scoped:  # the common case: the view's own caches, shared by its agents
            self._specs = view.specs()
            self._governed = view._governed  # (brought up to date by specs())
        else:
            scoped = tuple(t.spec for t in self._scoped.values())
            self._specs = scoped + view.specs()
            found = (self.get(spec.name) for spec in self._specs)
            self._governed = tuple(t for t in found if t is not None and t.permission is not None)
        self._specs_key = version
