"""Partial answers in a real browser: a page reloaded in the middle of an answer
shows it from its first word and goes on without repeating anything, and a stopped
answer keeps its words and its (estimated) usage."""

from __future__ import annotations

from typing import Any

import pytest

from goaai.runtime.models.scripted import STORY
from tests.browser.helpers import answer, expect, open_chat, send, wait_connected, wait_run

pytestmark = pytest.mark.browser

# Samples, every 50 ms from the moment the page loads, the text of the first answer
# on the page and the status of its run, into window.__answers.
_SAMPLE_ANSWER = """
(() => {
  window.__answers = [];
  setInterval(() => {
    const run = document.querySelector('[data-testid="run"]');
    const text = run && run.querySelector('[data-testid="assistant-message"] .msg-text');
    if (text) window.__answers.push({ text: text.innerText, status: run.dataset.status });
  }, 50);
})();
"""


def words(text: str) -> str:
    return " ".join(text.split())


def test_a_reload_mid_answer_shows_the_story_from_its_first_word_without_repeating(
    new_context, alice_api
):
    context = new_context("alice")
    page = context.new_page()
    open_chat(page, alice_api.new_session("A story to reload"))
    run = send(page, "tell me a story")
    expect(answer(run)).to_contain_text("Once upon a time")
    # Two seconds into the story (it streams for about nine), the page reloads.
    page.wait_for_timeout(2000)
    page.add_init_script(_SAMPLE_ANSWER)

    page.reload()
    wait_connected(page)
    reloaded = page.get_by_test_id("run").nth(0)
    wait_run(reloaded, "completed")
    expect(answer(reloaded).locator(".msg-text")).to_have_text(STORY)

    samples: list[dict[str, Any]] = page.evaluate("() => window.__answers")
    shown = [sample for sample in samples if sample["text"].strip()]
    streaming = [sample for sample in shown if sample["status"] != "completed"]
    assert streaming, "the answer had finished before the page came back"
    # From the first thing the reloaded page shows, the story from its first word...
    first = words(streaming[0]["text"])
    assert first.startswith("Once upon a time"), first
    assert len(first) < len(words(STORY))
    # ...and from then on only more of it: nothing repeated, nothing skipped.
    story = words(STORY)
    for sample in shown:
        assert story.startswith(words(sample["text"])), sample["text"]
    grew = [len(words(sample["text"])) for sample in streaming]
    assert grew == sorted(grew)
    assert grew[-1] > grew[0], "the answer did not go on streaming after the reload"


# Keeps the page's WebSockets in window.__liveSockets, so that a test can drop one.
_KEEP_SOCKETS = """
(() => {
  const Native = window.WebSocket;
  window.__liveSockets = [];
  window.WebSocket = class extends Native {
    constructor(url, protocols) {
      super(url, protocols);
      window.__liveSockets.push(this);
    }
  };
})();
"""


def test_a_connection_lost_mid_answer_comes_back_without_repeating_a_word(new_context, alice_api):
    page = new_context("alice").new_page()
    page.add_init_script(_KEEP_SOCKETS)
    page.add_init_script(_SAMPLE_ANSWER)
    open_chat(page, alice_api.new_session("A story through a bad line"))
    run = send(page, "tell me a story")
    expect(answer(run)).to_contain_text("Once upon a time")
    page.wait_for_timeout(1500)

    # The connection drops; the page keeps what it shows and reconnects from the last
    # event it saw. Meanwhile the story goes on: the page must catch up on the words
    # it missed without repeating those it has.
    page.evaluate("() => window.__liveSockets.at(-1).close()")
    page.wait_for_function("() => window.__liveSockets.length === 2")
    wait_connected(page)
    wait_run(run, "completed")

    expect(answer(run).locator(".msg-text")).to_have_text(STORY)
    samples: list[dict[str, Any]] = page.evaluate("() => window.__answers")
    story = words(STORY)
    for sample in samples:
        assert story.startswith(words(sample["text"])), sample["text"]


def test_stop_keeps_the_words_and_the_usage_line_marked_estimated(page, alice_api):
    open_chat(page, alice_api.new_session("A story to stop"))
    run = send(page, "tell me a story")
    message = answer(run)
    expect(message).to_contain_text("Once upon a time")
    page.wait_for_timeout(1200)

    page.get_by_test_id("stop-button").click()
    wait_run(run, "canceled")

    kept = words(message.locator(".msg-text").inner_text())
    assert kept.startswith("Once upon a time")
    assert len(kept) < len(words(STORY))
    usage = run.get_by_test_id("run-usage")
    expect(usage).to_contain_text("tokens")
    expect(usage).to_contain_text("estimated")
    assert "estimated" in (usage.get_attribute("title") or "").lower()
    run_id = run.get_attribute("data-run-id")
    recorded = alice_api.get(f"runs/{run_id}/")
    (turn,) = recorded["turns"]
    assert (turn["interruption"], turn["usage_estimated"]) == ("canceled", True)
    assert words(turn["response"]["text"]) == kept
    assert recorded["usage"]["output_tokens"] > 0

    # The record keeps it: a reload shows the same words and the same usage line.
    line = usage.inner_text()
    page.reload()
    wait_connected(page)
    reloaded = page.get_by_test_id("run").nth(0)
    wait_run(reloaded, "canceled")
    assert words(answer(reloaded).locator(".msg-text").inner_text()) == kept
    expect(reloaded.get_by_test_id("run-usage")).to_have_text(line)
