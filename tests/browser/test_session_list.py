"""The session list: only one's own chats, kept up to date live."""

from __future__ import annotations

import re

import pytest

from tests.browser.helpers import (
    expect,
    send,
    session_id_of,
    track_sockets,
    wait_connected,
    wait_run,
    wait_socket_frame,
)

pytestmark = pytest.mark.browser

_CLOSE_CODE = """(path) => new Promise((resolve) => {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const socket = new WebSocket(`${scheme}//${location.host}${path}`);
    socket.addEventListener("close", (event) => resolve(event.code));
})"""


def test_another_users_chat_is_not_found(new_context, alice_api, bob_api):
    bobs = bob_api.new_session("Bob's private plans")
    run = bob_api.start_run(bobs, "remember my secret is 42")
    bob_api.wait_run(run["id"], {"completed"})
    alices = alice_api.new_session("Alice's own chat")

    page = new_context("alice").new_page()
    response = page.goto(f"/sessions/{bobs}/")
    assert response.status == 404
    expect(page.locator("body")).not_to_contain_text("private plans")
    expect(page.locator("body")).not_to_contain_text("secret")
    # Nor through the API or the live stream, from alice's signed-in browser.
    assert page.request.get(f"/api/v1/sessions/{bobs}/").status == 404
    assert page.request.get(f"/api/v1/sessions/{bobs}/events/").status == 404
    assert page.evaluate(_CLOSE_CODE, f"/ws/sessions/{bobs}/") == 4404

    page.goto("/")
    items = page.get_by_test_id("session-list").get_by_test_id("session-item")
    expect(items.and_(page.locator(f'[data-session-id="{alices}"]'))).to_have_count(1)
    expect(page.locator(f'[data-session-id="{bobs}"]')).to_have_count(0)
    expect(page.get_by_test_id("session-list")).not_to_contain_text("Bob's private plans")
    page.get_by_test_id("session-search").fill("private")
    page.get_by_test_id("session-search").press("Enter")
    expect(page.get_by_test_id("empty-list")).to_contain_text("No chat has a title containing")

    # The chat page's sidebar does not list it either; bob does see his chat.
    page.goto(f"/sessions/{alices}/")
    wait_connected(page)
    expect(page.get_by_test_id("sidebar")).not_to_contain_text("Bob's private plans")
    bob_page = new_context("bob").new_page()
    assert bob_page.goto(f"/sessions/{bobs}/").status == 200
    expect(bob_page.get_by_test_id("chat-title")).to_have_text("Bob's private plans")


def test_the_list_follows_chats_in_another_tab(new_context):
    context = new_context("alice")
    list_page = context.new_page()
    track_sockets(list_page)
    list_page.goto("/")
    # The list's live stream is subscribed before anything happens elsewhere.
    wait_socket_frame(list_page, "/ws/sessions/", "ready")

    chat_page = context.new_page()
    chat_page.goto("/sessions/new/")
    chat_page.get_by_test_id("start-chat").click()
    chat_page.wait_for_url(re.compile(r".*/sessions/[0-9a-f-]{36}/$"))
    session_id = session_id_of(chat_page)
    wait_connected(chat_page)

    item = list_page.locator(f'[data-testid="session-item"][data-session-id="{session_id}"]')
    expect(item).to_have_count(1)
    expect(item.locator('[data-role="title"]')).to_have_text("Untitled chat")
    expect(item.get_by_test_id("run-status")).to_be_hidden()

    run = send(chat_page, "calculate 2 + 3")
    wait_run(run, "completed")
    expect(item.get_by_test_id("run-status")).to_have_text("done")
    expect(item.get_by_test_id("run-status")).to_be_visible()
    # An untitled chat is named after its first message, in the list as well.
    expect(item.locator('[data-role="title"]')).to_have_text("calculate 2 + 3")
    expect(list_page.locator(f'[data-session-id="{session_id}"]')).to_have_count(1)

    # A run that waits for the user shows as such, and as stopped once stopped.
    run = send(chat_page, "ask me for my name")
    wait_run(run, "awaiting_input")
    expect(item.get_by_test_id("run-status")).to_have_text("needs you")
    chat_page.get_by_test_id("stop-button").click()
    wait_run(run, "canceled")
    expect(item.get_by_test_id("run-status")).to_have_text("stopped")
