"""The chat page in a real browser: a conversation that remembers, approvals, and
stopping a run."""

from __future__ import annotations

import re

import pytest

from tests.browser.helpers import (
    answer,
    expect,
    login,
    open_chat,
    send,
    session_id_of,
    tool_card,
    transcript_snapshot,
    wait_connected,
    wait_run,
)

pytestmark = pytest.mark.browser


def test_remember_reload_and_recall(new_context):
    page = new_context(None).new_page()
    login(page, "alice")
    expect(page.get_by_role("heading", name="Your chats")).to_be_visible()

    page.get_by_test_id("new-chat-link").click()
    page.get_by_test_id("agent-assistant").check()
    page.get_by_label("Title").fill("Colours")
    page.get_by_test_id("start-chat").click()
    page.wait_for_url(re.compile(r".*/sessions/[0-9a-f-]{36}/$"))
    session_id = session_id_of(page)
    wait_connected(page)
    expect(page.get_by_test_id("chat-title")).to_have_text("Colours")
    expect(page.get_by_role("heading", name="Start the conversation")).to_be_visible()

    run = send(page, "remember my favourite colour is green")
    card = tool_card(run, "memory_store")
    expect(card).to_have_attribute("data-state", "succeeded")
    expect(card.get_by_test_id("tool-state")).to_have_text("succeeded")
    expect(answer(run)).to_have_text(
        "Got it. I'll remember in this conversation that your favourite colour is green."
    )
    wait_run(run, "completed")
    expect(run.get_by_test_id("run-status")).to_contain_text("Done")
    expect(page.get_by_role("heading", name="Start the conversation")).to_be_hidden()
    # The card expands to its result and arguments.
    card.get_by_test_id("tool-toggle").click()
    expect(card.get_by_test_id("tool-toggle")).to_have_attribute("aria-expanded", "true")
    expect(card.get_by_test_id("tool-result")).to_contain_text('"value": "green"')
    expect(card.get_by_test_id("tool-arguments")).to_contain_text('"key": "favourite colour"')
    before = transcript_snapshot(page)

    page.reload()
    wait_connected(page)
    assert page.url.endswith(f"/sessions/{session_id}/")
    after = transcript_snapshot(page)
    assert after == before
    assert len(after) == 1
    assert after[0]["answers"] == [
        "Got it. I'll remember in this conversation that your favourite colour is green."
    ]
    assert after[0]["tools"] == ["memory_store:succeeded"]
    expect(page.get_by_test_id("tool-card")).to_have_count(1)
    expect(page.get_by_test_id("assistant-message")).to_have_count(1)

    run = send(page, "what is my favourite colour")
    expect(tool_card(run, "memory_recall")).to_have_attribute("data-state", "succeeded")
    wait_run(run, "completed")
    expect(answer(run)).to_have_count(1)
    expect(answer(run)).to_contain_text("green")
    expect(page.get_by_test_id("run")).to_have_count(2)

    # The memory drawer shows what the run wrote.
    page.get_by_test_id("memory-toggle").click()
    entry = page.get_by_test_id("memory-session").get_by_test_id("memory-entry")
    expect(entry).to_have_count(1)
    expect(entry.get_by_test_id("memory-key")).to_have_text("favourite colour")
    expect(entry.get_by_test_id("memory-value")).to_have_text("green")


def test_approve_then_deny_with_a_reason(page, alice_api):
    open_chat(page, alice_api.new_session("Approvals"))

    run = send(page, "forget everything")
    card = tool_card(run, "memory_forget_all")
    expect(card).to_have_attribute("data-state", "awaiting_approval")
    expect(card.get_by_test_id("tool-state")).to_have_text("needs approval")
    wait_run(run, "awaiting_input")
    expect(run.get_by_test_id("run-status")).to_contain_text("Waiting for your approval")
    expect(page.get_by_test_id("composer-note")).to_contain_text("waits for your approval")
    expect(page.get_by_test_id("stop-button")).to_be_visible()
    card.get_by_role("button", name="Approve").click()
    expect(card).to_have_attribute("data-state", "succeeded")
    expect(card.get_by_test_id("decision-note")).to_contain_text("Approved by you")
    expect(card.get_by_role("button", name="Approve")).to_have_count(0)
    wait_run(run, "completed")
    expect(answer(run)).to_have_text("There was nothing to forget in this conversation.")
    expect(page.get_by_test_id("composer-note")).to_be_hidden()
    expect(page.get_by_test_id("stop-button")).to_be_hidden()

    run = send(page, "forget everything")
    card = tool_card(run, "memory_forget_all")
    expect(card).to_have_attribute("data-state", "awaiting_approval")
    card.get_by_label("Reason for denying").fill("keep my notes")
    card.get_by_role("button", name="Deny").click()
    expect(card).to_have_attribute("data-state", "denied")
    expect(card.get_by_test_id("tool-state")).to_have_text("denied")
    decision = card.get_by_test_id("decision-note")
    expect(decision).to_contain_text("Denied by you")
    expect(decision).to_contain_text("keep my notes")
    expect(card.get_by_role("button", name="Deny")).to_have_count(0)
    wait_run(run, "completed")
    expect(answer(run)).to_have_text("I couldn't do that: A person denied this call: keep my notes")
    # The first exchange is untouched.
    assert [item["tools"] for item in transcript_snapshot(page)] == [
        ["memory_forget_all:succeeded"],
        ["memory_forget_all:denied"],
    ]


def test_stop_a_waiting_run_with_the_button_and_with_escape(page, alice_api):
    open_chat(page, alice_api.new_session("Stopping"))
    send_button = page.get_by_test_id("send-button")
    stop_button = page.get_by_test_id("stop-button")
    composer_form = page.get_by_test_id("composer-form")

    # A question keeps the run waiting: Stop is offered, Send answers the question.
    run = send(page, "ask me for my name")
    card = tool_card(run, "ask_user")
    expect(card).to_have_attribute("data-state", "awaiting_answer")
    expect(card.get_by_test_id("question")).to_have_text("What is your name?")
    wait_run(run, "awaiting_input")
    expect(stop_button).to_be_visible()
    expect(send_button).to_have_text("Answer")
    expect(composer_form).to_have_attribute("data-state", "waiting")
    stop_button.click()
    wait_run(run, "canceled")
    expect(run.get_by_test_id("run-status")).to_have_text("Stopped by you")
    expect(card).to_have_attribute("data-state", "canceled")
    expect(card.get_by_test_id("answer-button")).to_have_count(0)
    expect(stop_button).to_be_hidden()
    expect(send_button).to_be_visible()
    expect(send_button).to_have_text("Send")
    expect(composer_form).to_have_attribute("data-state", "idle")

    # Every tool call needs approval with "Ask me before each tool"; Esc stops.
    page.get_by_test_id("review-toggle").check()
    run = send(page, "calculate 2 + 3")
    card = tool_card(run, "calculator")
    expect(card).to_have_attribute("data-state", "awaiting_approval")
    expect(stop_button).to_be_visible()
    page.get_by_test_id("composer").press("Escape")
    wait_run(run, "canceled")
    expect(card).to_have_attribute("data-state", "canceled")
    expect(card.get_by_test_id("approve-button")).to_have_count(0)
    expect(card.get_by_test_id("respond-status")).to_contain_text("stopped")
    expect(stop_button).to_be_hidden()
    expect(send_button).to_have_text("Send")
    expect(composer_form).to_have_attribute("data-state", "idle")
    assert alice_api.get(f"runs/{run.get_attribute('data-run-id')}/")["status"] == "canceled"


def test_stop_a_streaming_answer_keeps_what_was_said(page, alice_api):
    from goaai.runtime.models.scripted import STORY

    open_chat(page, alice_api.new_session("A story"))
    run = send(page, "tell me a story")
    message = answer(run)
    # A few words in (the story streams at a reading pace), press Stop.
    expect(message).to_contain_text("Once upon a time")
    page.get_by_test_id("stop-button").click()
    wait_run(run, "canceled")
    expect(run.get_by_test_id("stopped-tag")).to_be_visible()
    shown = message.inner_text().replace("stopped", "").strip()
    assert shown.startswith("Once upon a time")
    assert len(shown) < len(STORY), "the answer went on after Stop"

    # What was said before Stop is part of the record: a reload shows it again.
    page.reload()
    wait_connected(page)
    reloaded = page.get_by_test_id("run").nth(0)
    wait_run(reloaded, "canceled")
    kept = answer(reloaded).inner_text().replace("stopped", "").strip()
    assert kept.startswith("Once upon a time")
    assert len(kept) < len(STORY)
    expect(reloaded.get_by_test_id("stopped-tag")).to_be_visible()
