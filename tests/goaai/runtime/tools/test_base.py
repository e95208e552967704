"""Tools validate their arguments before they run: a model that sends bad ones gets
an ``invalid_call`` it can correct; a tool that breaks gives ``internal``; a tool
that refuses gives the refusal's kind."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from pydantic import Field

from goaai.runtime.errors import UnknownTool
from goaai.runtime.tools import TOOLSETS, ToolContext, ToolRejected, tool, tools_for
from goaai.runtime.vocabulary import ErrorKind


@tool()
def repeat(
    text: Annotated[str, Field(description="What to repeat.", max_length=20)],
    times: int = 2,
) -> dict[str, Any]:
    """Repeat a text.

    This second paragraph is not part of the description."""
    return {"text": text * times}


@tool(name="broken")
def broken_tool(value: int) -> None:
    """Always breaks."""
    raise KeyError("missing")


@tool(name="picky", description="Refuses odd numbers.")
def picky(value: int) -> int:
    if value % 2:
        raise ToolRejected(f"{value} is odd.")
    if value < 0:
        raise ToolRejected("Too busy.", kind=ErrorKind.RATE_LIMITED)
    return value


@tool()
def whoami(context: ToolContext) -> str:
    """Says which run is calling."""
    return str(context.run_id)


def test_a_valid_call_runs_the_tool():
    outcome = repeat.invoke({"text": "ab", "times": 3}, context=None)

    assert outcome.ok
    assert outcome.result == {"text": "ababab"}
    assert outcome.for_model() == {"ok": True, "result": {"text": "ababab"}}


def test_defaults_fill_in_missing_optional_arguments():
    assert repeat.invoke({"text": "ab"}, context=None).result == {"text": "abab"}


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        pytest.param({}, "text: Field required", id="missing"),
        pytest.param(
            {"text": "a", "colour": "red"}, "colour: Extra inputs are not permitted", id="extra"
        ),
        pytest.param({"text": 5}, "text: Input should be a valid string", id="wrong type"),
        pytest.param(
            {"text": "a", "times": "many"},
            "times: Input should be a valid integer",
            id="not a number",
        ),
        pytest.param(
            {"text": "a" * 21}, "text: String should have at most 20 characters", id="too long"
        ),
    ],
)
def test_invalid_arguments_give_an_invalid_call_naming_the_problem(arguments, problem):
    outcome = repeat.invoke(arguments, context=None)

    assert not outcome.ok
    assert outcome.error_kind == ErrorKind.INVALID_CALL
    assert outcome.error_message.startswith("Invalid arguments for repeat: ")
    assert problem in outcome.error_message


def test_every_problem_is_named_at_once():
    outcome = repeat.invoke({"times": "x", "extra": 1}, context=None)

    for field in ("text:", "times:", "extra:"):
        assert field in outcome.error_message


@pytest.mark.parametrize("arguments", [None, [], "text=a", 3])
def test_arguments_that_are_not_an_object_give_an_invalid_call(arguments):
    outcome = repeat.invoke(arguments, context=None)

    assert (outcome.error_kind, outcome.error_message) == (
        ErrorKind.INVALID_CALL,
        "Arguments of repeat must be a JSON object.",
    )


def test_a_tool_that_raises_gives_an_internal_error():
    outcome = broken_tool.invoke({"value": 1}, context=None)

    assert outcome.error_kind == ErrorKind.INTERNAL
    assert outcome.error_message == "broken failed: KeyError: 'missing'"


def test_a_refusing_tool_gives_a_domain_rejection_with_its_message():
    outcome = picky.invoke({"value": 3}, context=None)

    assert (outcome.error_kind, outcome.error_message) == (ErrorKind.DOMAIN_REJECTION, "3 is odd.")


def test_a_refusal_may_name_another_kind():
    outcome = picky.invoke({"value": -2}, context=None)

    assert (outcome.error_kind, outcome.error_message) == (ErrorKind.RATE_LIMITED, "Too busy.")


def test_a_tool_may_receive_its_context_which_is_not_an_argument():
    context = ToolContext(
        store=None,  # type: ignore[arg-type]
        run_id="run-1",  # type: ignore[arg-type]
        session_id="s",  # type: ignore[arg-type]
        owner_id=1,
        agent="assistant",
        tool_call_id="tc",  # type: ignore[arg-type]
    )

    assert whoami.invoke({}, context).result == "run-1"
    assert "context" not in whoami.json_schema().get("properties", {})
    assert whoami.invoke({"context": "forged"}, context).error_kind == ErrorKind.INVALID_CALL


def test_the_schema_and_description_come_from_the_signature_and_docstring():
    schema = repeat.json_schema()

    assert repeat.name == "repeat"
    assert repeat.description == "Repeat a text."
    assert "title" not in schema
    assert schema["required"] == ["text"]
    assert schema["properties"]["text"]["description"] == "What to repeat."
    assert schema["properties"]["times"]["type"] == "integer"
    assert schema["additionalProperties"] is False
    assert picky.description == "Refuses odd numbers."


def test_the_schema_is_worked_out_once_and_each_caller_gets_its_own_copy():
    first = repeat.json_schema()
    first["properties"]["text"]["description"] = "changed by a caller"
    first["required"].append("times")

    second = repeat.json_schema()
    assert second["properties"]["text"]["description"] == "What to repeat."
    assert second["required"] == ["text"]
    fresh = repeat.arguments_model.model_json_schema()
    fresh.pop("title")
    assert second == fresh


def test_a_parameter_without_a_type_hint_is_refused_when_the_tool_is_declared():
    with pytest.raises(TypeError, match="has no type hint"):

        @tool()
        def untyped(value):  # type: ignore[no-untyped-def]
            return value


def test_toolsets_name_their_tools():
    tools = tools_for(("calculator", "memory"))

    assert sorted(tools) == [
        "calculator",
        "memory_forget",
        "memory_forget_all",
        "memory_recall",
        "memory_search",
        "memory_store",
        # Every agent may read on in a truncated result.
        "read_tool_result",
    ]
    assert tools["memory_store"].toolset == "memory"
    assert tools["read_tool_result"].toolset == "results"
    assert set(TOOLSETS) >= {"memory", "clock", "calculator", "text"}


def test_an_unknown_toolset_is_refused():
    with pytest.raises(UnknownTool, match="nope"):
        tools_for(("calculator", "nope"))
