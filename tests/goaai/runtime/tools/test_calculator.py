"""The calculator: right answers, and a refusal (never a crash, never code) for
anything that is not plain arithmetic."""

from __future__ import annotations

import math

import pytest

from goaai.runtime.tools import ToolRejected
from goaai.runtime.tools.calculator import calculator, evaluate
from goaai.runtime.vocabulary import ErrorKind


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("1 + 1", 2),
        ("2 + 3 * 4", 14),
        ("(2 + 3) * 4", 20),
        ("2 * (3 + 4) / sqrt(16)", 3.5),
        ("10 - 4 - 3", 3),
        ("-2 ** 2", -4),
        ("2 ** 3 ** 2", 512),
        ("2^10", 1024),
        ("6 \u00d7 7", 42),  # the multiplication sign
        ("84 \u00f7 2", 42),  # the division sign
        ("7 // 2", 3),
        ("7 % 3", 1),
        ("-3 + +5", 2),
        ("1 / 4", 0.25),
        ("10 / 2", 5),
        ("0.1 + 0.2", 0.1 + 0.2),
        ("sqrt(16)", 4),
        ("abs(-7)", 7),
        ("round(2.567, 2)", 2.57),
        ("min(4, 2, 8)", 2),
        ("max(4, 2, 8)", 8),
        ("floor(2.7) + ceil(2.1)", 5),
        ("log10(1000)", 3),
        ("log(e)", 1),
        ("exp(0)", 1),
        ("cos(0)", 1),
        ("2 * pi", math.tau),
        ("tau / 2", math.pi),
        ("  3*3  ", 9),
    ],
)
def test_arithmetic_is_evaluated_correctly(expression, value):
    assert evaluate(expression) == pytest.approx(value)


def test_whole_results_are_integers():
    assert isinstance(evaluate("10 / 2"), int)
    assert isinstance(evaluate("sqrt(16)"), int)
    assert isinstance(evaluate("1 / 4"), float)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("__import__('os').system('true')", "Unsupported element"),
        ("__import__", "Unsupported element"),
        ("open('/etc/passwd')", "Unsupported element"),
        ("(1).real", "Unsupported element"),
        ("math.pi", "Unsupported element"),
        ("pi.__class__", "Unsupported element"),
        ("[1, 2][0]", "Unsupported element"),
        ("'ab' * 3", "Unsupported element"),
        ("True + 1", "Unsupported element"),
        ("x + 1", "Unsupported element"),
        ("lambda: 1", "Unsupported element"),
        ("1 if 1 else 2", "Unsupported element"),
        ("round(2.5, ndigits=1)", "Unsupported element"),
        ("max(*[1, 2])", "Unsupported element"),
        ("1 << 1000", "Unsupported element"),
        ("2 ** 100000", "Exponents above 1000"),
        ("9 ** 9 ** 9", "Exponents above 1000"),
        ("10 ** 1000", "too large"),
        ("2 ** 999 * 2 ** 999", "too large"),
        ("1e308 * 10", "too large"),
        ("1 / 0", "Division by zero"),
        ("1 // 0", "Division by zero"),
        ("5 % 0", "Division by zero"),
        ("(-8) ** 0.5", "not a real number"),
        ("sqrt(-1)", "Cannot compute"),
        ("exp(1000)", "Cannot compute"),
        ("min()", "Cannot compute"),
        ("2 +", "Not an arithmetic expression"),
        ("import os", "Not an arithmetic expression"),
        ("", "empty"),
        ("   ", "empty"),
        ("1+" * 300 + "1", "longer than 500"),
    ],
)
def test_anything_but_plain_arithmetic_is_rejected_with_a_reason(expression, message):
    with pytest.raises(ToolRejected, match=message) as excinfo:
        evaluate(expression)
    assert excinfo.value.kind == ErrorKind.DOMAIN_REJECTION


def test_the_calculator_tool_answers_with_the_expression_and_its_value():
    outcome = calculator.invoke({"expression": "6*7"}, context=None)

    assert outcome.ok
    assert outcome.result == {"expression": "6*7", "value": 42}


def test_the_calculator_tool_turns_a_rejection_into_a_domain_rejection():
    outcome = calculator.invoke({"expression": "1/0"}, context=None)

    assert (outcome.error_kind, outcome.error_message) == (
        ErrorKind.DOMAIN_REJECTION,
        "Division by zero.",
    )
    assert outcome.for_model() == {
        "ok": False,
        "error": {"kind": "domain_rejection", "message": "Division by zero."},
    }
