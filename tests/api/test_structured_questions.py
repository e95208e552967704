"""Questions that offer choices: POST /api/v1/runs/{id}/respond/ with ``{choices}``
(or ``{answer}`` in words), what the waiting run shows, what is recorded, and what
is refused."""

from __future__ import annotations

import pytest
from django.core.cache import cache

from goaai.runtime import rt
from runs_app.models import Run, ToolCall
from sessions_app.models import RunEvent
from tests.factories import RunFactory, SessionFactory, ToolCallFactory

CHOICES = ["tea", "coffee", "water"]


@pytest.fixture(autouse=True)
def _fresh_throttles():
    # Run creation is throttled per user in the cache, which outlives a test.
    cache.clear()


def respond_url(run_id) -> str:
    return f"/api/v1/runs/{run_id}/respond/"


def asked(api, owner, text: str) -> dict:
    """The run a message starts, as it is once it waits for an answer."""
    session = rt.create_session(owner=owner, agent="assistant")
    created = api.post(f"/api/v1/sessions/{session.id}/runs/", {"input": text}, format="json")
    assert created.status_code == 201
    run = api.get(f"/api/v1/runs/{created.json()['id']}/").json()
    assert run["status"] == "awaiting_input"
    return run


def waiting_on_choices(owner, *, multiple: bool = False) -> tuple[Run, ToolCall]:
    """A run that waits on a question offering CHOICES, made with factories."""
    run = RunFactory(session=SessionFactory(owner=owner), status="running")
    call = ToolCallFactory(
        turn__run=run,
        name="ask_user",
        arguments={"question": "Which?", "choices": CHOICES, "multiple": multiple},
        status="scheduled",
        result=None,
    )
    awaiting = {
        "kind": "question",
        "tool_call": str(call.pk),
        "question": "Which?",
        "choices": CHOICES,
        "multiple": multiple,
    }
    Run.objects.filter(pk=run.pk).update(status="awaiting_input", awaiting=awaiting)
    run.refresh_from_db()
    return run, call


def decided_event(run_id) -> dict:
    return RunEvent.objects.get(run_id=run_id, type="tool_call.decided").data


# The question, and the answers it takes


@pytest.mark.django_db(transaction=True)
def test_a_question_with_choices_shows_them_and_a_picked_one_answers_it(api, owner, inline_runtime):
    waiting = asked(api, owner, "ask me to choose between tea, coffee or water")
    assert waiting["awaiting"] == {
        "kind": "question",
        "tool_call": waiting["awaiting"]["tool_call"],
        "question": "Which one do you choose?",
        "choices": CHOICES,
        "multiple": False,
    }

    response = api.post(respond_url(waiting["id"]), {"choices": ["coffee"]}, format="json")

    assert response.status_code == 200
    run = api.get(f"/api/v1/runs/{waiting['id']}/").json()
    assert (run["status"], run["output"]) == ("completed", "You chose coffee.")
    call = api.get(f"/api/v1/tool-calls/{waiting['awaiting']['tool_call']}/").json()
    assert call["result"] == {"answer": "coffee", "chosen": ["coffee"]}
    assert (call["decision"], call["decided_by"]) == ("answered", owner.pk)
    decided = decided_event(waiting["id"])
    assert (decided["answer"], decided["chosen"], decided["decided_by_name"]) == (
        "coffee",
        ["coffee"],
        owner.username,
    )


@pytest.mark.django_db(transaction=True)
def test_several_choices_answer_a_question_that_takes_any_number(api, owner, inline_runtime):
    waiting = asked(api, owner, "ask me to choose any of tea, coffee and water")
    assert waiting["awaiting"]["multiple"] is True

    response = api.post(respond_url(waiting["id"]), {"choices": ["water", "tea"]}, format="json")

    assert response.status_code == 200
    run = Run.objects.get(pk=waiting["id"])
    assert (run.status, run.output) == ("completed", "You chose tea and water.")
    call = ToolCall.objects.get(pk=waiting["awaiting"]["tool_call"])
    # In the order the question offered them.
    assert call.result == {"answer": "tea, water", "chosen": ["tea", "water"]}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("answer", "result", "output"),
    [
        ("Coffee", {"answer": "coffee", "chosen": ["coffee"]}, "You chose coffee."),
        ("milk, please", {"answer": "milk, please"}, "You answered: milk, please."),
    ],
    ids=["naming a choice", "words of ones own"],
)
def test_a_question_with_choices_may_be_answered_in_words(
    api, owner, inline_runtime, answer, result, output
):
    waiting = asked(api, owner, "ask me to choose between tea, coffee or water")

    response = api.post(respond_url(waiting["id"]), {"answer": answer}, format="json")

    assert response.status_code == 200
    run = Run.objects.get(pk=waiting["id"])
    assert (run.status, run.output) == ("completed", output)
    assert ToolCall.objects.get(pk=waiting["awaiting"]["tool_call"]).result == result
    assert decided_event(waiting["id"])["answer"] == result["answer"]


@pytest.mark.django_db
def test_a_plain_question_shows_no_choices(api, owner):
    run = RunFactory(session=SessionFactory(owner=owner), status="running")
    call = ToolCallFactory(turn__run=run, name="ask_user", status="scheduled", result=None)
    awaiting = {"kind": "question", "tool_call": str(call.pk), "question": "Your name?"}
    Run.objects.filter(pk=run.pk).update(status="awaiting_input", awaiting=awaiting)

    shown = api.get(f"/api/v1/runs/{run.pk}/").json()["awaiting"]

    assert "choices" not in shown
    assert "multiple" not in shown


# What is refused, with nothing recorded


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "attr", "named"),
    [
        ({"choices": ["milk"]}, "choices", "'milk' is not one of the choices"),
        ({"choices": ["Coffee"]}, "choices", "'Coffee' is not one of the choices"),
        ({"choices": ["tea", "coffee"]}, "choices", "exactly one"),
        ({"choices": []}, "choices", ""),
        ({"choices": "coffee"}, "choices", ""),
        ({"choices": [1]}, "choices", ""),
        ({"choices": [["coffee"]]}, "choices", ""),
        ({"choices": [{"choice": "coffee"}]}, "choices", ""),
        ({"choices": None}, "choices", ""),
        ({"choices": [""]}, "choices", ""),
        ({"choices": ["x" * 201]}, "choices", ""),
        ({"choices": [f"c{n}" for n in range(21)]}, "choices", ""),
        ({"choices": ["coffee"], "answer": "coffee"}, "non_field_errors", ""),
        ({"choices": ["coffee"], "decision": "approve"}, "non_field_errors", ""),
        ({"answer": ""}, "answer", ""),
        ({"answer": ["coffee"]}, "answer", ""),
    ],
    ids=[
        "not offered",
        "not as offered",
        "two where one",
        "empty list",
        "a string",
        "a number",
        "a nested list",
        "an object",
        "null",
        "an empty choice",
        "a choice too long",
        "too many",
        "choices and an answer",
        "choices and a decision",
        "an empty answer",
        "an answer as a list",
    ],
)
def test_an_answer_the_question_does_not_take_is_a_400_and_changes_nothing(
    api, owner, inline_runtime, body, attr, named
):
    run, call = waiting_on_choices(owner)

    response = api.post(respond_url(run.pk), body, format="json")

    assert response.status_code == 400
    error = response.json()
    assert error["type"] == "validation_error"
    # A bad item of a list is named by its place in it: choices.0.
    assert attr in {e["attr"].split(".")[0] for e in error["errors"]}
    assert named in " ".join(e["detail"] for e in error["errors"])
    run.refresh_from_db()
    call.refresh_from_db()
    assert (run.status, call.status, call.decision, call.result) == (
        "awaiting_input",
        "scheduled",
        "",
        None,
    )
    assert not RunEvent.objects.filter(run_id=run.pk, type="tool_call.decided").exists()


@pytest.mark.django_db
def test_a_choice_picked_twice_is_refused(api, owner, inline_runtime):
    run, _ = waiting_on_choices(owner, multiple=True)

    response = api.post(respond_url(run.pk), {"choices": ["tea", "tea"]}, format="json")

    assert response.status_code == 400
    assert response.json()["errors"][0]["detail"] == "'tea' is picked twice."
    run.refresh_from_db()
    assert run.status == "awaiting_input"


@pytest.mark.django_db
def test_choices_for_a_question_that_offers_none_are_refused(api, owner, inline_runtime):
    run = RunFactory(session=SessionFactory(owner=owner), status="running")
    call = ToolCallFactory(turn__run=run, name="ask_user", status="scheduled", result=None)
    awaiting = {"kind": "question", "tool_call": str(call.pk), "question": "Your name?"}
    Run.objects.filter(pk=run.pk).update(status="awaiting_input", awaiting=awaiting)

    response = api.post(respond_url(run.pk), {"choices": ["Ada"]}, format="json")

    assert response.status_code == 400
    assert response.json()["errors"][0]["attr"] == "choices"
    assert "offers no choices" in response.json()["errors"][0]["detail"]


@pytest.mark.django_db
def test_choices_for_a_run_waiting_for_an_approval_are_a_conflict(api, owner, inline_runtime):
    run = RunFactory(session=SessionFactory(owner=owner), status="running")
    call = ToolCallFactory(
        turn__run=run, name="memory_forget_all", status="scheduled", requires_approval=True
    )
    awaiting = {"kind": "approval", "tool_call": str(call.pk)}
    Run.objects.filter(pk=run.pk).update(status="awaiting_input", awaiting=awaiting)

    response = api.post(respond_url(run.pk), {"choices": ["tea"]}, format="json")

    assert response.status_code == 409
    call.refresh_from_db()
    assert call.decision == ""


@pytest.mark.django_db
def test_choices_for_a_run_that_no_longer_waits_are_a_conflict(api, owner, inline_runtime):
    run, _ = waiting_on_choices(owner)
    assert api.post(respond_url(run.pk), {"choices": ["tea"]}, format="json").status_code == 200

    again = api.post(respond_url(run.pk), {"choices": ["water"]}, format="json")

    assert again.status_code == 409
    assert ToolCall.objects.get(pk=run.awaiting["tool_call"]).result["chosen"] == ["tea"]


@pytest.mark.django_db
def test_another_users_question_cannot_be_answered(other_api, owner, inline_runtime):
    run, call = waiting_on_choices(owner)

    response = other_api.post(respond_url(run.pk), {"choices": ["tea"]}, format="json")

    assert response.status_code == 404
    call.refresh_from_db()
    assert call.decision == ""


# The schema


@pytest.mark.django_db
def test_the_schema_documents_choices_on_the_question_and_in_the_answer(api):
    schema = api.get("/api/v1/schema/", {"format": "json"}).json()
    components = schema["components"]["schemas"]

    awaiting = components["Awaiting"]["properties"]
    assert awaiting["choices"]["type"] == "array"
    assert awaiting["multiple"]["type"] == "boolean"
    answer = components["RunRespondRequest"]["properties"]["choices"]
    assert (answer["type"], answer["maxItems"], answer["minItems"]) == ("array", 20, 1)
    assert answer["items"]["maxLength"] == 200
    respond = schema["paths"]["/api/v1/runs/{id}/respond/"]["post"]
    assert "choices" in respond["description"]
