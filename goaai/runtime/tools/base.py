"""Tools: Python callables whose argument schema comes from their type hints.

A tool is declared with :func:`tool`. Its arguments are validated with a pydantic
model built from the signature before the callable runs, so a model that sends bad
arguments gets a structured ``invalid_call`` error to correct, never a crashed run.
A tool signals a refusal it understands (a bad expression, an unknown time zone)
by raising :class:`ToolRejected`; any other exception is recorded as ``internal``.
"""

from __future__ import annotations

import copy
import functools
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, get_type_hints
from uuid import UUID

import pydantic

from goaai.runtime.types import RunInfo, ToolOutcome
from goaai.runtime.vocabulary import ErrorKind

if TYPE_CHECKING:
    from goaai.runtime.store import RunStore

logger = logging.getLogger(__name__)


class DelegationPaused(Exception):
    """Raised by an agent tool whose child run waits for a person: the calling run
    must wait too, until the child has its answer and ends."""

    def __init__(self, child: RunInfo) -> None:
        super().__init__(f"child run {child.id} awaits input")
        self.child = child


class ToolRejected(Exception):
    """Raised by a tool that refuses its input for a reason the model can act on."""

    def __init__(self, message: str, kind: str = ErrorKind.DOMAIN_REJECTION) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass(frozen=True)
class ToolContext:
    """Where a tool call happens: the tool may read and write through ``store``."""

    store: RunStore
    run_id: UUID
    session_id: UUID
    owner_id: int
    agent: str
    tool_call_id: UUID
    # Runs another agent as a child of this call and returns the finished child run.
    call_agent: Callable[[str, str], RunInfo] | None = None


@functools.lru_cache(maxsize=1024)
def _schema_of(model: type[pydantic.BaseModel]) -> dict[str, Any]:
    """The JSON schema of a tool's arguments model, worked out once per model: every
    run tells its model the schemas of its tools, and pydantic builds one in about
    the time a run takes to record a step. Bounded: tools made at run time (an MCP
    server's, a caller's) bring models of their own."""
    schema = model.model_json_schema()
    schema.pop("title", None)
    return schema


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    func: Callable[..., Any]
    arguments_model: type[pydantic.BaseModel]
    toolset: str = ""
    requires_approval: bool = False
    # An idempotent tool may be executed again when a worker died during the call.
    idempotent: bool = False
    # None: the tool runs in the loop's own thread with no time limit (agent calls,
    # whose child runs have their own budget).
    timeout_seconds: float | None = 30.0
    takes_context: bool = field(default=False)
    # The call is answered by a person (a question), not by running ``func``.
    asks_user: bool = False
    # The call is executed by the caller that offered the tool (see
    # goaai.runtime.tools.client): the run waits for its result.
    answered_by_caller: bool = False

    def json_schema(self) -> dict[str, Any]:
        """The JSON schema of the tool's arguments (the caller's own copy)."""
        return copy.deepcopy(_schema_of(self.arguments_model))

    def invoke(self, arguments: Any, context: ToolContext) -> ToolOutcome:
        """Validate ``arguments``, call the tool, and say how it went."""
        if not isinstance(arguments, dict):
            return ToolOutcome(
                error_kind=ErrorKind.INVALID_CALL,
                error_message=f"Arguments of {self.name} must be a JSON object.",
            )
        try:
            parsed = self.arguments_model.model_validate(arguments)
        except pydantic.ValidationError as exc:
            return ToolOutcome(
                error_kind=ErrorKind.INVALID_CALL,
                error_message=_describe_validation_error(self.name, exc),
            )
        kwargs = {name: getattr(parsed, name) for name in type(parsed).model_fields}
        if self.takes_context:
            kwargs["context"] = context
        try:
            result = self.func(**kwargs)
        except DelegationPaused:
            raise
        except ToolRejected as exc:
            return ToolOutcome(error_kind=exc.kind, error_message=exc.message)
        except Exception as exc:
            logger.exception("Tool %s raised", self.name)
            return ToolOutcome(
                error_kind=ErrorKind.INTERNAL,
                error_message=f"{self.name} failed: {type(exc).__name__}: {exc}",
            )
        return ToolOutcome(result=result)


def _describe_validation_error(tool_name: str, exc: pydantic.ValidationError) -> str:
    problems = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"]) or "arguments"
        problems.append(f"{where}: {error['msg']}")
    return f"Invalid arguments for {tool_name}: " + "; ".join(problems)


def tool(
    name: str | None = None,
    *,
    description: str | None = None,
    requires_approval: bool = False,
    idempotent: bool = False,
    timeout_seconds: float | None = 30.0,
    asks_user: bool = False,
) -> Callable[[Callable[..., Any]], Tool]:
    """Turn a typed function into a :class:`Tool`.

    Every parameter needs a type hint; a parameter named ``context`` receives the
    :class:`ToolContext` and is not part of the schema. The docstring's first
    paragraph is the description the model reads unless ``description`` is given.
    """

    def decorate(func: Callable[..., Any]) -> Tool:
        hints = get_type_hints(func, include_extras=True)
        fields: dict[str, Any] = {}
        takes_context = False
        for param in inspect.signature(func).parameters.values():
            if param.name == "context":
                takes_context = True
                continue
            if param.name not in hints:
                raise TypeError(f"Tool {func.__name__}: parameter {param.name} has no type hint")
            default = ... if param.default is inspect.Parameter.empty else param.default
            fields[param.name] = (hints[param.name], default)
        tool_name = name or func.__name__
        model = pydantic.create_model(
            f"{tool_name}_arguments",
            __config__=pydantic.ConfigDict(extra="forbid", strict=False),
            **fields,
        )
        doc = description or (inspect.getdoc(func) or "").split("\n\n")[0].replace("\n", " ")
        return Tool(
            name=tool_name,
            description=doc,
            func=func,
            arguments_model=model,
            requires_approval=requires_approval,
            idempotent=idempotent,
            timeout_seconds=timeout_seconds,
            takes_context=takes_context,
            asks_user=asks_user,
        )

    return decorate
