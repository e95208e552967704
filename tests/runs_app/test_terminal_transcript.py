"""How the terminal chat prints a session: streamed text on one line per answer,
ended by the turn's ``message.completed`` (which brings what did not stream), tool
calls and endings on lines of their own; and how a reply picks a question's
choices."""

from __future__ import annotations

import io

import pytest
from django.core.management.base import OutputWrapper
from django.core.management.color import no_style

from goaai.runtime.questions import Question
from runs_app.terminal.conversation import picked
from runs_app.terminal.feed import Delta
from runs_app.terminal.transcript import Transcript, stopped_text

RUN, CHILD = "run-1", "run-2"


def transcript() -> tuple[Transcript, io.StringIO]:
    out = io.StringIO()
    shown = Transcript(OutputWrapper(out), no_style(), agent="assistant")
    shown.event({"type": "run.created", "run": RUN, "data": {"agent": "assistant"}})
    shown.event({"type": "run.created", "run": CHILD, "data": {"agent": "helper"}})
    return shown, out


def event(kind: str, run: str = RUN, **data) -> dict:
    return {"type": kind, "run": run, "data": data}


def test_streamed_text_is_one_line_that_the_completed_message_ends():
    shown, out = transcript()
    for piece in ("Once ", "upon ", "a "):
        shown.delta(Delta(run=RUN, turn="t1", text=piece))
    assert out.getvalue() == "assistant> Once upon a "

    # What did not stream arrives with the message; the run's end repeats nothing.
    shown.event(event("message.completed", turn="t1", text="Once upon a time."))
    shown.event(event("run.completed", output="Once upon a time."))
    assert out.getvalue() == "assistant> Once upon a time.\n"


def test_a_piece_sent_again_is_printed_once():
    shown, out = transcript()
    shown.delta(Delta(run=RUN, turn="t1", text="Once upon ", offset=0))
    shown.delta(Delta(run=RUN, turn="t1", text="upon a ", offset=5))
    shown.delta(Delta(run=RUN, turn="t1", text="a ", offset=10))
    assert out.getvalue() == "assistant> Once upon a "


def test_a_message_that_differs_from_what_streamed_is_printed_whole():
    shown, out = transcript()
    shown.delta(Delta(run=RUN, turn="t1", text="Thinking... "))
    shown.event(event("model.retry", turn="t1", error_kind="unavailable", message="busy"))
    shown.event(event("message.completed", turn="t1", text="The answer."))
    assert out.getvalue().splitlines() == [
        "assistant> Thinking... ",
        "  (the model failed, unavailable: busy; retrying)",
        "assistant> The answer.",
    ]


def test_tool_calls_end_the_streamed_line_and_each_run_has_its_name():
    shown, out = transcript()
    shown.delta(Delta(run=RUN, turn="t1", text="Let me ask."))
    shown.event(
        event(
            "tool_call.scheduled",
            tool_call="c1",
            name="ask_helper",
            arguments={"q": "x"},
            requires_approval=False,
        )
    )
    shown.event(event("tool_call.started", tool_call="c1", name="ask_helper", attempt=1))
    shown.delta(Delta(run=CHILD, turn="t2", text="Helping."))
    shown.event(event("message.completed", run=CHILD, turn="t2", text="Helping."))
    shown.event(event("tool_call.succeeded", tool_call="c1", name="ask_helper", result={"a": 1}))
    shown.event(event("message.completed", turn="t3", text="Done."))
    assert out.getvalue().splitlines() == [
        "assistant> Let me ask.",
        '  -> ask_helper({"q": "x"})',
        "helper> Helping.",
        '  <- ask_helper: {"a": 1}',
        "assistant> Done.",
    ]


def test_a_run_the_user_stopped_here_ends_with_stopped():
    shown, out = transcript()
    shown.stopping.add(RUN)
    shown.delta(Delta(run=RUN, turn="t1", text="Once upon "))
    shown.event(event("run.canceled", reason="stopped by the user"))
    assert out.getvalue() == "assistant> Once upon \nStopped.\n"


@pytest.mark.parametrize(
    ("data", "told"),
    [
        ({"reason": "the user sent a new message"}, "Stopped: the user sent a new message"),
        ({"reason": "", "stopped_by": {"kind": "user"}}, "Stopped by you."),
        (
            {"reason": "tidying up", "stopped_by": {"kind": "operator", "user": "maria"}},
            "Stopped by an operator (maria): tidying up",
        ),
        ({"reason": "", "stopped_by": {"kind": "superseded"}}, "Replaced by your next message."),
        (
            {"reason": "", "stopped_by": {"kind": "policy", "rule": "time_budget"}},
            "Stopped by policy (time_budget).",
        ),
    ],
)
def test_a_run_stopped_elsewhere_says_who_stopped_it(data, told):
    assert stopped_text(data) == told


@pytest.mark.parametrize(
    ("reply", "answer", "choices"),
    [
        ("2", None, ["coffee"]),
        (" 1, 3 ", None, ["tea", "water"]),
        ("4", "4", None),  # no choice has that number: an answer in words
        ("Coffee", "Coffee", None),  # words naming a choice (the server picks it)
        ("something else", "something else", None),
    ],
)
def test_a_reply_picks_choices_by_their_numbers(reply, answer, choices):
    question = Question(text="Which?", choices=("tea", "coffee", "water"), multiple=True)
    assert picked(reply, question) == (answer, choices)


def test_numbers_are_words_for_a_question_without_choices():
    assert picked("42", Question(text="How old are you?")) == ("42", None)


def test_a_run_taken_up_again_or_queued_says_so():
    shown, out = transcript()
    shown.delta(Delta(run=RUN, turn="t1", text="Once "))
    shown.event(
        event(
            "run.interrupted",
            cause="process_ended",
            reason="the worker's process ended",
            worker="w",
        )
    )
    shown.event(event("run.queued", behind="run-0", ahead=1, multitask="enqueue"))
    assert out.getvalue().splitlines() == [
        "assistant> Once ",
        "  (interrupted: the worker's process ended; resuming)",
        "  (queued: starts when run run-0 has ended)",
    ]
