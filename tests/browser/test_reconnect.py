"""A chat page that loses its WebSocket catches up from the event log when it
reconnects: what happened meanwhile appears once, nothing on screen is wiped."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlparse

import pytest

from tests.browser.helpers import (
    answer,
    expect,
    open_chat,
    send,
    sockets,
    track_sockets,
    transcript_snapshot,
    wait_run,
)

pytestmark = pytest.mark.browser

# Runs in a manage.py process of its own while the server is down; the inline
# executor runs them to the end before the process exits.
_RUNS_WHILE_DOWN = """
from goaai.runtime import rt
rt.configure(executor="inline")
for text in ("calculate 2 + 3", "echo hello while you were away"):
    info = rt.run("assistant", text, session={session!r}, timeout=30)
    assert info.status == "completed", info
"""


def _socket_afters(page, session_id):
    path = f"/ws/sessions/{session_id}/"
    return [
        int(parse_qs(urlparse(s["url"]).query)["after"][0])
        for s in sockets(page)
        if urlparse(s["url"]).path == path
    ]


def test_catch_up_after_the_server_restarts(page, alice_api, goaai_server):
    session_id = alice_api.new_session("Reconnecting")
    track_sockets(page)
    open_chat(page, session_id)
    first = send(page, "remember my favourite colour is green")
    wait_run(first, "completed")
    # The run's end and its answer's last piece can come in one frame; the text is
    # drawn on the next animation frame.
    expect(answer(first)).to_have_text(
        "Got it. I'll remember in this conversation that your favourite colour is green."
    )
    before = transcript_snapshot(page)
    seen = alice_api.get(f"sessions/{session_id}/")["last_event_seq"]

    banner = page.get_by_test_id("connection-banner")
    goaai_server.stop()
    expect(banner).to_have_attribute("data-state", "reconnecting")
    expect(banner).to_contain_text(re.compile(r"Reconnecting… \(attempt \d+\)"))
    # Events happen while the page cannot hear them.
    goaai_server.shell(_RUNS_WHILE_DOWN.format(session=session_id))
    # Nothing was wiped meanwhile.
    assert transcript_snapshot(page) == before

    goaai_server.start()
    expect(banner).to_have_attribute("data-state", "connected", timeout=30_000)
    expect(banner.locator('[data-role="text"]')).to_have_text(
        "Connected again. You are up to date."
    )
    runs = page.get_by_test_id("run")
    expect(runs).to_have_count(3)
    wait_run(runs.nth(2), "completed")
    expect(answer(runs.nth(1))).to_have_text("2 + 3 = 5")
    expect(answer(runs.nth(2))).to_have_text("hello while you were away")

    after = transcript_snapshot(page)
    assert after[0] == before[0]
    assert [item["input"] for item in after] == [
        "remember my favourite colour is green",
        "calculate 2 + 3",
        "echo hello while you were away",
    ]
    assert [len(item["answers"]) for item in after] == [1, 1, 1]
    assert [item["tools"] for item in after] == [
        ["memory_store:succeeded"],
        ["calculator:succeeded"],
        ["echo:succeeded"],
    ]
    expect(page.get_by_test_id("tool-card")).to_have_count(3)
    expect(page.get_by_test_id("user-message")).to_have_count(3)
    expect(page.get_by_test_id("assistant-message")).to_have_count(3)
    # The page resumed from what it had seen, not from the start.
    afters = _socket_afters(page, session_id)
    assert afters[0] == 0
    assert afters[-1] == seen
    # It asks for events in frames of several (a step's events in one): the live
    # run's on the first socket, the missed runs' backlog on the last.
    chat = [s for s in sockets(page) if urlparse(s["url"]).path == f"/ws/sessions/{session_id}/"]
    assert {parse_qs(urlparse(s["url"]).query)["batch"][0] for s in chat} == {"1"}
    assert "events" in chat[0]["frames"]
    assert "events" in chat[-1]["frames"]

    # A reload shows the same conversation.
    page.reload()
    expect(banner).to_have_attribute("data-state", "connected")
    assert transcript_snapshot(page) == after


def test_offline_and_back(page, alice_api):
    session_id = alice_api.new_session("Offline")
    open_chat(page, session_id)
    first = send(page, "calculate 6 * 7")
    wait_run(first, "completed")
    # The run's end and its answer's last piece can come in one frame; the text is
    # drawn on the next animation frame.
    expect(answer(first)).to_have_text("6 * 7 = 42")
    before = transcript_snapshot(page)

    banner = page.get_by_test_id("connection-banner")
    page.context.set_offline(True)
    expect(banner).to_have_attribute("data-state", "offline")
    expect(banner).to_contain_text("You are offline")
    run = alice_api.start_run(session_id, "echo sent from another device")
    alice_api.wait_run(run["id"], {"completed"})
    assert transcript_snapshot(page)[0] == before[0]

    page.context.set_offline(False)
    runs = page.get_by_test_id("run")
    expect(runs).to_have_count(2)
    wait_run(runs.nth(1), "completed")
    expect(answer(runs.nth(1))).to_have_text("sent from another device")
    after = transcript_snapshot(page)
    assert after[0] == before[0]
    assert [len(item["answers"]) for item in after] == [1, 1]
    expect(page.get_by_test_id("assistant-message")).to_have_count(2)

    # Chromium's offline mode holds the socket's frames without closing it, so the
    # page does not reconnect: a ping tells it the connection is back.
    expect(banner).to_have_attribute("data-state", "connected", timeout=5000)
