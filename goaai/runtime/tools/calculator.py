"""A calculator that evaluates arithmetic safely: a whitelist walk of Python's AST,
never ``eval``."""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import Field

from goaai.runtime.tools.base import ToolRejected, tool

MAX_EXPRESSION_LENGTH = 500
# Bounds that keep one call cheap: 10**100000 would take seconds and megabytes.
MAX_EXPONENT = 1000
MAX_MAGNITUDE = 10**300

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "abs": abs,
    "round": round,
    "min": min,
    "max": max,
    "sqrt": math.sqrt,
    "log": math.log,
    "log10": math.log10,
    "exp": math.exp,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "floor": math.floor,
    "ceil": math.ceil,
}
_CONSTANTS = {"pi": math.pi, "e": math.e, "tau": math.tau}


def evaluate(expression: str) -> int | float:
    """The value of an arithmetic expression, or :class:`ToolRejected` saying why not."""
    text = expression.strip().replace("^", "**").replace("\u00d7", "*").replace("\u00f7", "/")
    if not text:
        raise ToolRejected("The expression is empty.")
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise ToolRejected(f"The expression is longer than {MAX_EXPRESSION_LENGTH} characters.")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise ToolRejected(f"Not an arithmetic expression: {expression!r}") from exc
    try:
        value = _eval(tree.body)
    except ZeroDivisionError as exc:
        raise ToolRejected("Division by zero.") from exc
    except (OverflowError, ValueError, TypeError) as exc:
        raise ToolRejected(f"Cannot compute {expression!r}: {exc}") from exc
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if not isinstance(value, int | float):
        raise ToolRejected(f"Cannot compute {expression!r}: not a number.")
    return value


def _eval(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.Name) and node.id in _CONSTANTS:
        return _CONSTANTS[node.id]
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ToolRejected(f"Exponents above {MAX_EXPONENT} are not supported.")
        result = _BINARY[type(node.op)](left, right)
        if isinstance(result, complex):
            raise ToolRejected("The result is not a real number.")
        if abs(result) > MAX_MAGNITUDE:
            raise ToolRejected("The result is too large.")
        return result
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCTIONS
        and not node.keywords
    ):
        return _FUNCTIONS[node.func.id](*(_eval(arg) for arg in node.args))
    raise ToolRejected(f"Unsupported element in expression: {ast.unparse(node)!r}")


@tool(idempotent=True)
def calculator(
    expression: Annotated[
        str,
        Field(description="An arithmetic expression, e.g. '2 * (3 + 4) / sqrt(16)'."),
    ],
) -> dict[str, Any]:
    """Evaluate an arithmetic expression: + - * / // % ** and sqrt, log, sin, round, pi..."""
    return {"expression": expression, "value": evaluate(expression)}
