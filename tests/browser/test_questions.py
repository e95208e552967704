"""Questions that offer choices, in a real browser: the choices are buttons on the
question's card (one click answers; several toggle and Send answers), and the
answer box still takes words of one's own."""

from __future__ import annotations

import pytest

from tests.browser.helpers import answer, expect, open_chat, send, tool_card, wait_run

pytestmark = pytest.mark.browser


def test_one_click_on_a_choice_answers_the_question(page, alice_api):
    open_chat(page, alice_api.new_session("Drinks"))

    run = send(page, "ask me to choose between tea, coffee or water")
    card = tool_card(run, "ask_user")
    expect(card).to_have_attribute("data-state", "awaiting_answer")
    expect(card.get_by_test_id("question")).to_have_text("Which one do you choose?")
    choices = card.get_by_test_id("choice-button")
    expect(choices).to_have_text(["tea", "coffee", "water"])
    # The answer box stays, for an answer the choices do not cover.
    expect(card.get_by_label("Or answer in your own words")).to_be_visible()
    wait_run(run, "awaiting_input")

    card.get_by_role("button", name="coffee").click()

    expect(card).to_have_attribute("data-state", "succeeded")
    expect(card.get_by_test_id("decision-note")).to_contain_text("Answered by you")
    expect(card.get_by_test_id("question-answer")).to_have_text("Answer: coffee")
    expect(card.get_by_test_id("choice-button")).to_have_count(0)
    wait_run(run, "completed")
    expect(answer(run)).to_have_text("You chose coffee.")
    run_id = run.get_attribute("data-run-id")
    call = alice_api.get(f"runs/{run_id}/")["turns"][0]["tool_calls"][0]
    assert call["result"] == {"answer": "coffee", "chosen": ["coffee"]}


def test_several_choices_toggle_and_send_answers_with_them(page, alice_api):
    open_chat(page, alice_api.new_session("Drinks, several"))

    run = send(page, "ask me to choose any of tea, coffee and water")
    card = tool_card(run, "ask_user")
    expect(card).to_have_attribute("data-state", "awaiting_answer")
    send_choices = card.get_by_role("button", name="Send choices")
    expect(send_choices).to_be_disabled()
    tea = card.get_by_role("button", name="tea")
    water = card.get_by_role("button", name="water")

    tea.click()
    water.click()
    water.click()  # off again
    expect(tea).to_have_attribute("aria-pressed", "true")
    expect(water).to_have_attribute("aria-pressed", "false")
    water.click()
    expect(send_choices).to_be_enabled()
    send_choices.click()

    expect(card).to_have_attribute("data-state", "succeeded")
    wait_run(run, "completed")
    expect(answer(run)).to_have_text("You chose tea and water.")
    expect(card.get_by_test_id("question-answer")).to_have_text("Answer: tea, water")


def test_a_question_with_choices_takes_words_of_ones_own(page, alice_api):
    open_chat(page, alice_api.new_session("Drinks, in words"))

    run = send(page, "ask me to choose between tea, coffee or water")
    card = tool_card(run, "ask_user")
    expect(card).to_have_attribute("data-state", "awaiting_answer")
    card.get_by_label("Or answer in your own words").fill("lemonade")
    card.get_by_test_id("answer-button").click()

    wait_run(run, "completed")
    expect(answer(run)).to_have_text("You answered: lemonade.")
    expect(card.get_by_test_id("question-answer")).to_have_text("Answer: lemonade")
