"""Feedback on answers in a real browser: thumbs up or down with an optional
comment, stored as the run's feedback (the API shows it), kept across a reload,
and taken back by pressing the same thumb again."""

from __future__ import annotations

import pytest

from tests.browser.helpers import answer, expect, open_chat, send, wait_connected, wait_run

pytestmark = pytest.mark.browser


def feedback_of(alice_api, run) -> dict | None:
    shown: dict | None = alice_api.get(f"runs/{run.get_attribute('data-run-id')}/")["feedback"]
    return shown


def test_thumbs_up_is_stored_and_the_same_thumb_takes_it_back(page, alice_api):
    open_chat(page, alice_api.new_session("Feedback"))
    run = send(page, "calculate 6 * 7")
    wait_run(run, "completed")
    expect(answer(run)).to_contain_text("42")
    up = run.get_by_test_id("feedback-up")
    down = run.get_by_test_id("feedback-down")
    expect(up).to_have_attribute("aria-pressed", "false")

    up.click()

    expect(up).to_have_attribute("aria-pressed", "true")
    expect(down).to_have_attribute("aria-pressed", "false")
    expect(run.get_by_test_id("feedback-form")).to_be_visible()
    assert feedback_of(alice_api, run) == {"value": "up", "comment": ""}

    up.click()

    expect(up).to_have_attribute("aria-pressed", "false")
    expect(run.get_by_test_id("feedback-form")).to_be_hidden()
    page.wait_for_function(
        "(id) => fetch(`/api/v1/runs/${id}/`).then((r) => r.json())"
        ".then((r) => r.feedback === null)",
        arg=run.get_attribute("data-run-id"),
    )
    assert feedback_of(alice_api, run) is None


def test_thumbs_down_with_a_comment_survives_a_reload(page, alice_api):
    open_chat(page, alice_api.new_session("Feedback with a comment"))
    run = send(page, "echo the capital of Australia is Sydney")
    wait_run(run, "completed")

    run.get_by_test_id("feedback-down").click()
    comment = run.get_by_label("What was wrong with it? (optional)")
    expect(comment).to_be_focused()  # typing can start at once
    comment.fill("Canberra is the capital.")
    run.get_by_test_id("feedback-save").click()

    expect(run.get_by_test_id("feedback-form")).to_be_hidden()
    expect(run.get_by_test_id("feedback-status")).to_have_text("Thanks for the comment.")
    expect(run.get_by_test_id("feedback-down")).to_be_focused()
    assert feedback_of(alice_api, run) == {"value": "down", "comment": "Canberra is the capital."}

    page.reload()
    wait_connected(page)
    reloaded = page.get_by_test_id("run").first
    expect(reloaded.get_by_test_id("feedback-down")).to_have_attribute("aria-pressed", "true")
    expect(reloaded.get_by_test_id("feedback-up")).to_have_attribute("aria-pressed", "false")

    # The other thumb replaces it: one feedback per answer, its comment gone.
    reloaded.get_by_test_id("feedback-up").click()
    expect(reloaded.get_by_test_id("feedback-up")).to_have_attribute("aria-pressed", "true")
    expect(reloaded.get_by_test_id("feedback-down")).to_have_attribute("aria-pressed", "false")
    page.wait_for_function(
        "(id) => fetch(`/api/v1/runs/${id}/`).then((r) => r.json())"
        ".then((r) => r.feedback && r.feedback.value === 'up')",
        arg=reloaded.get_attribute("data-run-id"),
    )
    assert feedback_of(alice_api, reloaded) == {"value": "up", "comment": ""}


def test_an_answer_under_way_offers_no_thumbs_yet(page, alice_api):
    open_chat(page, alice_api.new_session("Feedback waits"))
    run = send(page, "ask me for my name")
    wait_run(run, "awaiting_input")

    expect(run.get_by_test_id("feedback-up")).to_be_hidden()
