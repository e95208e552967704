"""What the chat does once a person acted, in a real browser: focus stays on the card
they settled (not the top of the page), a question's card keeps its answer (after a
reload too), a composer error goes with its cause, the memory drawer shows the
entry as it is after a conflict, refuses an empty value and keeps an edit under way
through a reload, and an empty chat suggests what its own agent can do."""

from __future__ import annotations

import pytest

from tests.browser.helpers import expect, open_chat, send, tool_card, wait_connected, wait_run

pytestmark = pytest.mark.browser

FOCUS_IN = (
    "(card) => card.contains(document.activeElement) && document.activeElement !== document.body"
)


def focus_is_in(card) -> bool:
    inside: bool = card.evaluate(FOCUS_IN)
    return inside


def test_focus_after_approve_lands_on_the_card(page, alice_api):
    open_chat(page, alice_api.new_session("Focus, approve"))
    run = send(page, "forget everything")
    card = tool_card(run, "memory_forget_all")
    expect(card).to_have_attribute("data-state", "awaiting_approval")

    card.get_by_role("button", name="Approve").click()

    note = card.get_by_test_id("decision-note")
    expect(note).to_contain_text("Approved by you")
    expect(note).to_be_focused()
    wait_run(run, "completed")
    assert focus_is_in(card)


def test_focus_after_deny_lands_on_the_card(page, alice_api):
    open_chat(page, alice_api.new_session("Focus, deny"))
    run = send(page, "forget everything")
    card = tool_card(run, "memory_forget_all")
    expect(card).to_have_attribute("data-state", "awaiting_approval")
    card.get_by_label("Reason for denying").fill("not today")

    card.get_by_label("Reason for denying").press("Tab")  # to Deny
    expect(card.get_by_role("button", name="Deny")).to_be_focused()
    page.keyboard.press("Enter")

    note = card.get_by_test_id("decision-note")
    expect(note).to_contain_text("Denied by you")
    expect(note).to_be_focused()


def test_a_question_answered_on_its_card_keeps_the_answer_and_the_focus(page, alice_api):
    open_chat(page, alice_api.new_session("Focus, answer"))
    run = send(page, "ask me for my name")
    card = tool_card(run, "ask_user")
    expect(card).to_have_attribute("data-state", "awaiting_answer")

    card.get_by_test_id("answer-input").fill("Ada")
    card.get_by_test_id("answer-button").click()

    expect(card.get_by_test_id("decision-note")).to_be_focused()
    expect(card.get_by_test_id("question")).to_have_text("What is your name?")
    expect(card.get_by_test_id("question-answer")).to_have_text("Answer: Ada")
    wait_run(run, "completed")

    page.reload()
    wait_connected(page)
    card = tool_card(page.get_by_test_id("run").first, "ask_user")
    expect(card.get_by_test_id("question")).to_have_text("What is your name?")
    expect(card.get_by_test_id("question-answer")).to_have_text("Answer: Ada")
    expect(card.get_by_test_id("decision-note")).to_contain_text("Answered by you")


def test_a_question_answered_from_the_message_box_shows_it_on_the_card(page, alice_api):
    open_chat(page, alice_api.new_session("Answer from the box"))
    run = send(page, "ask me to choose between tea, coffee or water")
    card = tool_card(run, "ask_user")
    expect(card).to_have_attribute("data-state", "awaiting_answer")
    composer = page.get_by_test_id("composer")

    composer.fill("water")
    composer.press("Enter")

    wait_run(run, "completed")
    expect(card.get_by_test_id("question")).to_have_text("Which one do you choose?")
    expect(card.get_by_test_id("question-answer")).to_have_text("Answer: water")
    # Typing went on in the box: the focus stays there.
    expect(composer).to_be_focused()


def test_a_composer_error_goes_with_its_cause(page, new_context, alice_api):
    open_chat(page, alice_api.new_session("Errors go"))
    composer = page.get_by_test_id("composer")
    error = page.get_by_test_id("composer-error")
    banner = page.get_by_test_id("connection-banner")

    page.context.set_offline(True)
    composer.fill("echo are you there")
    composer.press("Enter")
    expect(error).to_contain_text("could not be reached")

    # Back online: the chat reconnects, and the error that said it could not is gone.
    page.context.set_offline(False)
    expect(banner).to_have_attribute("data-state", "connected")
    expect(error).to_be_hidden()

    # An edit clears an error too.
    page.context.set_offline(True)
    composer.press("Enter")
    expect(error).to_be_visible()
    composer.press("!")
    expect(error).to_be_hidden()
    page.context.set_offline(False)
    expect(banner).to_have_attribute("data-state", "connected")

    # And the next successful send.
    composer.fill("echo there")
    composer.press("Enter")
    expect(page.get_by_test_id("run")).to_have_count(1)
    expect(error).to_be_hidden()


def test_the_memory_drawer_shows_the_entry_after_a_conflict_and_refuses_empty(page, alice_api):
    session = alice_api.new_session("Memory conflict")
    open_chat(page, session)
    run = send(page, "remember my favourite colour is green")
    wait_run(run, "completed")
    page.get_by_test_id("memory-toggle").click()
    entry = page.get_by_test_id("memory-session").get_by_test_id("memory-entry")
    expect(entry.get_by_test_id("memory-version")).to_have_text(" v1")

    entry.get_by_test_id("memory-edit").click()
    box = entry.get_by_test_id("memory-edit-input")
    box.fill("   ")
    entry.get_by_test_id("memory-save").click()
    expect(entry.get_by_test_id("memory-message")).to_contain_text("Type a value to save")
    expect(box).to_be_focused()
    stored = alice_api.get(f"memory/?session={session}")["results"][0]
    assert (stored["value"], stored["version"]) == ("green", 1)

    # Meanwhile another tab (here, the API) changes it.
    alice_api.call("PATCH", f"memory/{stored['id']}/", {"value": "teal", "version": 1})
    box.fill("blue")
    entry.get_by_test_id("memory-save").click()

    expect(entry.get_by_test_id("memory-message")).to_contain_text("changed meanwhile")
    expect(entry.get_by_test_id("memory-version")).to_have_text(" v2")
    expect(entry.get_by_test_id("memory-value")).to_have_text("teal")
    expect(entry.get_by_test_id("memory-meta")).to_contain_text("Written by you")
    expect(box).to_have_value("blue")  # what the user typed is kept

    entry.get_by_test_id("memory-save").click()  # now on top of version 2
    expect(entry.get_by_test_id("memory-value")).to_have_text("blue")
    assert alice_api.get(f"memory/{stored['id']}/")["value"] == "blue"


def test_an_empty_chat_suggests_what_its_agent_can_do(page, alice_api):
    open_chat(page, alice_api.new_session("Concierge", agent="concierge"))
    chips = page.get_by_test_id("suggestion")
    expect(chips.first).to_be_visible()
    texts = chips.all_inner_texts()
    assert "ask the assistant to calculate 12 * 7" in texts
    assert "ask me for my name" not in texts  # the assistant's, not the concierge's

    page.get_by_role("button", name="ask the assistant to calculate 12 * 7").click()
    composer = page.get_by_test_id("composer")
    expect(composer).to_have_value("ask the assistant to calculate 12 * 7")
    composer.press("Enter")
    run = page.get_by_test_id("run").first
    wait_run(run, "completed")
    expect(run.get_by_test_id("assistant-message").last).to_contain_text("84")


def test_an_entry_being_edited_keeps_its_focus_and_text_when_the_drawer_reloads(page, alice_api):
    session = alice_api.new_session("Memory reload")
    open_chat(page, session)
    wait_run(send(page, "remember my favourite colour is green"), "completed")
    page.get_by_test_id("memory-toggle").click()
    entries = page.get_by_test_id("memory-session").get_by_test_id("memory-entry")
    expect(entries).to_have_count(1)
    entry = entries.filter(has_text="favourite colour")
    entry.get_by_test_id("memory-edit").click()
    box = entry.get_by_test_id("memory-edit-input")
    box.fill("blue and")
    expect(box).to_be_focused()

    # Another run of the chat remembers something else: the drawer reloads.
    run = alice_api.start_run(session, "remember my favourite food is pizza")
    alice_api.wait_run(run["id"], {"completed"})
    expect(entries).to_have_count(2)

    expect(box).to_be_focused()
    expect(box).to_have_value("blue and")
    box.press("End")
    box.press_sequentially(" teal")
    expect(box).to_have_value("blue and teal")
