"""Questions with choices, in the runtime alone: what ``ask_user`` accepts from a
model, what a waiting run shows, and what a person's answer becomes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from goaai.runtime.agents import Agent, AgentRegistry
from goaai.runtime.errors import InvalidAnswer
from goaai.runtime.loop import TurnLoop
from goaai.runtime.models import ModelRequest
from goaai.runtime.policy import Policy
from goaai.runtime.questions import Question
from goaai.runtime.types import ModelReply, ToolCallRequest, Usage
from goaai.runtime.vocabulary import EventType, RunStatus, ToolCallStatus
from tests.runtime_core.conftest import ALICE, LEASE_SECONDS

E = EventType
DRINKS = Question(text="Which?", choices=("tea", "coffee", "water"))


@pytest.mark.parametrize(
    ("question", "answer", "choices", "result"),
    [
        (DRINKS, None, ["coffee"], {"answer": "coffee", "chosen": ["coffee"]}),
        (DRINKS, "  COFFEE ", None, {"answer": "coffee", "chosen": ["coffee"]}),
        (DRINKS, "milk", None, {"answer": "milk"}),
        (
            Question(text="Which?", choices=DRINKS.choices, multiple=True),
            None,
            ["water", "tea"],
            {"answer": "tea, water", "chosen": ["tea", "water"]},
        ),
        (Question(text="Your name?"), "Ada", None, {"answer": "Ada"}),
    ],
    ids=["a choice", "words naming one", "words of ones own", "several", "no choices"],
)
def test_what_an_answer_becomes(question, answer, choices, result):
    assert question.result(answer=answer, choices=choices) == result


@pytest.mark.parametrize(
    ("question", "answer", "choices", "field", "message"),
    [
        (DRINKS, None, ["milk"], "choices", "'milk' is not one of the choices ('tea', 'coffee'"),
        (DRINKS, None, ["tea", "coffee"], "choices", "Pick exactly one of the choices, not 2."),
        (DRINKS, None, [], "choices", "Pick at least one of the choices."),
        (DRINKS, None, [3], "choices", "Each choice must be a string."),
        (Question(text="Name?"), None, ["Ada"], "choices", "offers no choices"),
        (DRINKS, "tea", ["tea"], "answer", "not both"),
        (DRINKS, "", None, "answer", "The answer is empty."),
        (DRINKS, "x" * 32_001, None, "answer", "longer than 32000"),
    ],
    ids=[
        "not offered",
        "two of one",
        "none",
        "not a string",
        "none offered",
        "both",
        "empty",
        "long",
    ],
)
def test_what_an_answer_may_not_be(question, answer, choices, field, message):
    with pytest.raises(InvalidAnswer, match=message.replace("(", r"\(")) as refused:
        question.result(answer=answer, choices=choices)
    assert refused.value.field == field


class AskingModel:
    """Asks ``ask_user`` with ``arguments`` (corrected to a plain question when they
    come back invalid), then says what the answer was."""

    name = "asking"

    def __init__(self, arguments: dict[str, Any]) -> None:
        self.arguments = arguments
        self.requests: list[ModelRequest] = []

    def complete(self, request: ModelRequest, on_delta: Any = None) -> ModelReply:
        self.requests.append(request)
        results = [json.loads(m.content) for m in request.messages if m.role == "tool"]
        if results and results[-1]["ok"]:
            return ModelReply(text=f"answer: {results[-1]['result']}", usage=Usage(1, 1))
        arguments = self.arguments if not results else {"question": "Tea or coffee?"}
        call = ToolCallRequest(id=f"ask-{len(results)}", name="ask_user", arguments=arguments)
        return ModelReply(tool_calls=(call,), usage=Usage(1, 1))


def _run(store, model: AskingModel) -> tuple[TurnLoop, Any]:
    agent = Agent(
        id="asker",
        description="Asks questions.",
        model="asking",
        toolsets=("interaction",),
        policy=Policy(),
    )
    loop = TurnLoop(
        store=store,
        agents=AgentRegistry([agent]),
        model_factory=lambda name: model,
        lease_seconds=LEASE_SECONDS,
    )
    session = store.create_session(owner_id=ALICE, agent="asker", title="", metadata={})
    run = store.create_run(
        session_id=session.id, agent="asker", input="ask", labels={}, metadata={}, policy={}
    )
    return loop, run


def _awaiting(store, run) -> dict[str, Any]:
    events = store.events(run.session_id)
    return [e["data"] for e in events if e["type"] == E.RUN_AWAITING_INPUT][-1]


def test_a_question_with_choices_waits_for_one_and_the_model_reads_it(store):
    model = AskingModel({"question": "Tea or coffee?", "choices": [" tea ", "coffee"]})
    loop, run = _run(store, model)

    paused = loop.execute(run.id)

    assert paused is not None
    assert paused.status == RunStatus.AWAITING_INPUT
    assert _awaiting(store, run) == {
        "kind": "question",
        "tool_call": _awaiting(store, run)["tool_call"],
        "question": "Tea or coffee?",
        "choices": ["tea", "coffee"],
        "multiple": False,
    }
    store.respond(
        run.id,
        tool_call_id=None,
        decision="",
        reason="",
        answer=None,
        choices=["tea"],
        decided_by_id=ALICE,
    )
    info = loop.execute(run.id)
    assert info is not None
    assert info.output == "answer: {'answer': 'tea', 'chosen': ['tea']}"


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"question": "Which?", "choices": ["tea", "Tea"]}, "'Tea' is offered twice"),
        ({"question": "Which?", "choices": [f"c{n}" for n in range(21)]}, "at most 20 items"),
        ({"question": "Which?", "choices": [""]}, "at least 1 character"),
        ({"question": "Which?", "choices": "tea or coffee"}, "valid list"),
        ({"question": ""}, "at least 1 character"),
    ],
    ids=["twice", "too many", "empty choice", "not a list", "no question"],
)
def test_a_bad_question_goes_back_to_the_model_to_correct(store, arguments, problem):
    model = AskingModel(arguments)
    loop, run = _run(store, model)

    paused = loop.execute(run.id)

    # The bad question failed as an invalid call; the model asked a good one instead.
    assert paused is not None
    assert paused.status == RunStatus.AWAITING_INPUT
    first, second = [c for t in store.turns(run.id) for c in t.tool_calls]
    assert (first.status, first.error_kind) == (ToolCallStatus.FAILED, "invalid_call")
    assert problem in first.error_message
    assert second.status == ToolCallStatus.SCHEDULED
    assert _awaiting(store, run)["question"] == "Tea or coffee?"
    assert "choices" not in _awaiting(store, run)


def test_the_scripted_model_offers_choices_and_says_which_were_picked(engine):
    paused = engine.run("assistant", "ask me to choose any of tea, coffee and water")

    assert paused.status == RunStatus.AWAITING_INPUT
    awaiting = engine.events(paused.id, E.RUN_AWAITING_INPUT)[-1]
    assert (awaiting["choices"], awaiting["multiple"]) == (["tea", "coffee", "water"], True)
    engine.store.respond(
        paused.id,
        tool_call_id=None,
        decision="",
        reason="",
        answer=None,
        choices=["water", "coffee"],
        decided_by_id=ALICE,
    )
    info = engine.execute(paused.id)
    assert info is not None
    assert info.output == "You chose coffee and water."
    (decided,) = engine.events(paused.id, E.TOOL_CALL_DECIDED)
    assert (decided["answer"], decided["chosen"]) == ("coffee, water", ["coffee", "water"])


def test_the_scripted_model_asks_for_calls_together_and_answers_each(engine):
    info = engine.run("assistant", "together: echo hi; calculate 6*7; echo bye")

    assert info.status == RunStatus.COMPLETED
    assert info.output == "hi 6*7 = 42 bye"
    calls = engine.calls(info.id)
    assert [(c.index, c.name) for c in calls] == [(0, "echo"), (1, "calculator"), (2, "echo")]
    assert len(engine.store.turns(info.id)) == 2
