"""How the chat and the timeline show things, in a real browser: answers drawn as
markdown and nothing in them run as script, one clock in the user's time zone, the
chats in the order of their last activity, a chat deleted elsewhere told so, and a
model's failure told in plain words."""

from __future__ import annotations

import datetime as dt
import json
import re
import zoneinfo

import pytest

from tests.browser.helpers import (
    answer,
    expect,
    open_chat,
    send,
    track_sockets,
    wait_run,
    wait_socket_frame,
)

pytestmark = pytest.mark.browser

_STAFF = """
from django.contrib.auth import get_user_model
users = get_user_model()
if not users.objects.filter(username="charlie").exists():
    users.objects.create_user("charlie", password="wonderland-42", is_staff=True, is_superuser=True)
"""

# A flag any script that ran would raise, besides the dialog alert() opens.
_WATCH_SCRIPTS = """() => {
    window.__ran = false;
    window.alert = () => { window.__ran = true; };
}"""


def _sign_in_staff(page):
    page.goto("/admin/login/")
    page.get_by_label("Username:").fill("charlie")
    page.get_by_label("Password:").fill("wonderland-42")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Sessions, runs and memory")).to_be_visible()


def test_answers_are_markdown_and_html_in_them_runs_nothing(new_context, alice_api):
    session = alice_api.new_session("Markdown")
    page = new_context("alice").new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    open_chat(page, session)

    run = send(page, "echo **bold** and `code`")
    wait_run(run, "completed")
    body = answer(run).locator(".msg-text")
    expect(body.locator("strong")).to_have_text("bold")
    expect(body.locator("code")).to_have_text("code")
    expect(body).to_have_text("bold and code")

    page.evaluate(_WATCH_SCRIPTS)
    run = send(page, "echo <img src=x onerror=alert(1)> <script>alert(2)</script>")
    wait_run(run, "completed")
    # The markup is shown as the text it is; no element of it exists.
    expect(answer(run)).to_contain_text("<img src=x onerror=alert(1)>")
    expect(answer(run)).to_contain_text("<script>alert(2)</script>")
    assert page.locator("#transcript img, #transcript script").count() == 0
    run = send(page, "echo [goaai](https://example.com/docs) and [bad](javascript:alert(3))")
    wait_run(run, "completed")
    good = answer(run).get_by_role("link", name="goaai")
    expect(good).to_have_attribute("href", "https://example.com/docs")
    expect(good).to_have_attribute("target", "_blank")
    expect(good).to_have_attribute("rel", "noopener noreferrer")
    # A link to anything but http(s) or mailto loses its address.
    bad = answer(run).locator("a", has_text="bad")
    expect(bad).to_have_count(1)
    assert bad.get_attribute("href") is None
    bad.click()
    page.wait_for_timeout(300)
    assert dialogs == []
    assert page.evaluate("window.__ran") is False


def test_a_code_block_is_highlighted_and_its_copy_button_copies_it(new_context, alice_api):
    session = alice_api.new_session("Code")
    context = new_context("alice", permissions=["clipboard-read", "clipboard-write"])
    page = context.new_page()
    open_chat(page, session)
    code = "def double(x):\n    return 2 * x"
    text = f"Here:\n\n```python\n{code}\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |"
    run = send(page, "call echo " + json.dumps({"text": text}))
    wait_run(run, "completed")

    block = answer(run).get_by_test_id("code-block")
    expect(block).to_have_count(1)
    expect(block.locator(".code-language")).to_have_text("python")
    expect(block.locator("pre code")).to_have_text(code)
    # highlight.js marked the keyword.
    expect(block.locator("pre code .hljs-keyword").first).to_have_text("def")
    expect(answer(run).locator("table td").first).to_have_text("1")

    block.get_by_test_id("code-copy").click()
    expect(block.get_by_test_id("code-copy")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == code
    # The answer's own Copy copies the markdown as it was written.
    run.get_by_role("button", name="Copy", exact=True).click()
    assert page.evaluate("navigator.clipboard.readText()") == text


def test_markdown_is_drawn_while_it_streams(new_context, alice_api):
    session = alice_api.new_session("Streaming")
    page = new_context("alice").new_page()
    open_chat(page, session)
    # The story streams word by word; while it does, what has come is drawn already.
    run = send(page, "tell me a story")
    message = answer(run)
    expect(message).to_have_class(re.compile("is-streaming"))
    expect(message.locator(".msg-text p").first).to_be_visible()
    wait_run(run, "completed")
    expect(message).not_to_have_class(re.compile("is-streaming"))
    assert message.locator(".msg-text p").count() >= 1


def test_the_timeline_draws_replies_as_markdown_and_keeps_tool_results(
    new_context, goaai_server, alice_api
):
    goaai_server.shell(_STAFF)
    session = alice_api.new_session("Timeline markdown")
    run = alice_api.start_run(session, "echo **loud** <img src=x onerror=alert(1)>")
    alice_api.wait_run(run["id"], {"completed"})
    page = new_context(None).new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    _sign_in_staff(page)

    page.goto(f"/admin/runs_app/run/{run['id']}/timeline/")
    output = page.locator(".tl-header").get_by_test_id("timeline-markdown")
    expect(output.locator("strong")).to_have_text("loud")
    expect(output).to_contain_text("<img src=x onerror=alert(1)>")
    assert page.locator(".tl img").count() == 0
    # Source shows the text as the model wrote it.
    bar = page.locator("#run-output").locator("xpath=..")
    bar.get_by_role("button", name="Source").click()
    expect(page.locator("#run-output")).to_be_visible()
    expect(page.locator("#run-output")).to_contain_text("**loud**")
    expect(output).to_be_hidden()

    # The turn's reply is drawn too; the tool's result stays JSON text.
    page.get_by_role("button", name="Expand all").click()
    replies = page.locator(".tl-turn").get_by_test_id("timeline-markdown")
    expect(replies.locator("strong").first).to_have_text("loud")
    result = page.locator(".tl-panel pre.tl-pre", has_text='"text"').first
    expect(result).to_contain_text('"text": "**loud** <img src=x onerror=alert(1)>"')
    assert dialogs == []


def test_one_clock_in_the_browsers_time_zone(new_context, alice_api):
    zone = zoneinfo.ZoneInfo("America/Los_Angeles")
    session = alice_api.new_session("Clock check")
    run = alice_api.start_run(session, "calculate 6 * 7")
    alice_api.wait_run(run["id"], {"completed"})
    events = alice_api.get(f"sessions/{session}/events/")["results"]
    created = next(e for e in events if e["type"] == "run.created")
    active = dt.datetime.fromisoformat(alice_api.get(f"sessions/{session}/")["last_activity_at"])

    page = new_context("alice", timezone_id="America/Los_Angeles").new_page()
    page.goto("/")
    # The page learns the zone, and is written in it (loaded again once if need be).
    expect(page.locator('meta[name="time-zone"]')).to_have_attribute(
        "content", "America/Los_Angeles"
    )
    item = page.locator(f'[data-testid="session-item"][data-session-id="{session}"]')
    local = active.astimezone(zone)
    today = dt.datetime.now(zone).date()
    group = {0: "Today", 1: "Yesterday"}.get((today - local.date()).days, "")
    if group:
        expect(item.locator('[data-role="activity"]')).to_have_text(local.strftime("%H:%M"))
        heading = item.locator("xpath=ancestor::section[1]").locator(".session-group-title")
        expect(heading).to_have_text(group)

    open_chat(page, session)
    sidebar_item = page.get_by_test_id("sidebar").locator(f'[data-session-id="{session}"]')
    if group:
        expect(sidebar_item.locator('[data-role="activity"]')).to_have_text(local.strftime("%H:%M"))
    steps = page.get_by_test_id("run").first.get_by_test_id("run-steps")
    first_step = steps.locator("time").first
    expected = dt.datetime.fromisoformat(created["created_at"]).astimezone(zone)
    text = expected.strftime("%H:%M")
    if expected.date() != today:
        text = f"{expected.strftime('%b')} {expected.day}, {expected.year}, {text}"
    expect(first_step).to_have_text(text)
    # 24 hours everywhere: no AM or PM on the page.
    assert not re.search(r"\b[AP]M\b", page.locator("main").inner_text())


def test_a_message_moves_its_chat_to_the_top(new_context, alice_api):
    older = alice_api.new_session("Older chat")
    newer = alice_api.new_session("Newer chat")
    page = new_context("alice").new_page()
    track_sockets(page)
    page.goto("/")
    items = page.get_by_test_id("session-list").get_by_test_id("session-item")
    expect(items.first).to_have_attribute("data-session-id", newer)
    wait_socket_frame(page, "/ws/sessions/", "ready")

    run = alice_api.start_run(older, "calculate 1 + 1")
    expect(items.first).to_have_attribute("data-session-id", older)
    alice_api.wait_run(run["id"], {"completed"})
    page.reload()
    expect(items.first).to_have_attribute("data-session-id", older)
    expect(items.nth(1)).to_have_attribute("data-session-id", newer)


def test_a_chat_deleted_in_another_tab_says_so(new_context, alice_api):
    session = alice_api.new_session("Doomed")
    context = new_context("alice")
    chat = context.new_page()
    open_chat(chat, session)
    expect(chat.get_by_test_id("connection-banner")).to_have_attribute("data-state", "connected")

    other = context.new_page()
    other.goto("/")
    item = other.locator(f'[data-testid="session-item"][data-session-id="{session}"]')
    item.get_by_role("button", name="Delete chat Doomed").click()
    other.get_by_test_id("confirm-ok").click()
    expect(item).to_have_count(0)

    banner = chat.get_by_test_id("connection-banner")
    expect(banner.locator('[data-role="text"]')).to_have_text("This chat was deleted.")
    expect(banner).not_to_contain_text("Connected")
    expect(chat.get_by_test_id("composer")).to_be_disabled()
    expect(chat.get_by_test_id("send-button")).to_be_disabled()
    expect(chat.get_by_test_id("composer-note")).to_contain_text("This chat was deleted.")


def test_a_send_to_a_chat_deleted_unseen_says_so(new_context, goaai_server, alice_api):
    session = alice_api.new_session("Deleted elsewhere")
    page = new_context("alice").new_page()
    open_chat(page, session)
    # Deleted by another process: this server's live streams hear nothing of it.
    goaai_server.shell(
        f"from sessions_app.models import Session; Session.objects.filter(pk='{session}').delete()"
    )
    composer = page.get_by_test_id("composer")
    composer.fill("hello?")
    composer.press("Enter")
    banner = page.get_by_test_id("connection-banner")
    expect(banner.locator('[data-role="text"]')).to_have_text("This chat was deleted.")
    expect(banner).to_have_attribute("data-state", "offline")
    expect(composer).to_be_disabled()
    expect(page.get_by_test_id("composer-note")).to_contain_text("This chat was deleted.")
    expect(page.get_by_test_id("composer-error")).to_be_hidden()
    expect(page.locator("body")).not_to_contain_text("Not found")


def test_a_failed_answer_is_told_in_plain_words(new_context, alice_api):
    session = alice_api.new_session("Failing")
    page = new_context("alice").new_page()
    open_chat(page, session)
    # The scripted model fails this one (as a provider that cannot be reached would).
    run = send(page, "flaky echo plain words, please")
    wait_run(run, "failed")
    error = run.get_by_test_id("run-error")
    expect(error.get_by_test_id("run-error-message")).to_have_text(
        "The model, or a service this agent needs, is unavailable right now. "
        "Try again in a few minutes."
    )
    expect(error).to_have_attribute("data-kind", "unavailable")
    expect(run).not_to_contain_text("on purpose")
    expect(run.get_by_test_id("retry-button")).to_be_visible()
