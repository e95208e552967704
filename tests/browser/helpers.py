"""What the browser tests do on the chat page, in the words of its markup
(data-testid attributes, roles and labels)."""

from __future__ import annotations

import re
from typing import Any

try:
    from playwright.sync_api import expect
except ImportError:  # the conftest skips the tests (or, in CI, fails them)
    expect = None

from tests.browser.server import PASSWORD

SESSION_URL = re.compile(r".*/sessions/([0-9a-f-]{36})/$")


def login(page: Any, username: str, password: str = PASSWORD) -> None:
    """Signs in through the login page, as a person does."""
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(r".*/$"))


def open_chat(page: Any, session_id: str) -> None:
    """Opens a chat page and waits until its history is on screen (caught up)."""
    page.goto(f"/sessions/{session_id}/")
    wait_connected(page)


def wait_connected(page: Any) -> None:
    expect(page.get_by_test_id("connection-banner")).to_have_attribute("data-state", "connected")
    expect(page.get_by_test_id("transcript").locator('[data-role="loading"]')).to_have_count(0)


def session_id_of(page: Any) -> str:
    match = SESSION_URL.match(page.url)
    assert match, page.url
    return match.group(1)


def send(page: Any, text: str) -> Any:
    """Types a message, presses Enter, and returns the locator of its exchange."""
    runs = page.get_by_test_id("run")
    before = runs.count()
    composer = page.get_by_test_id("composer")
    composer.fill(text)
    composer.press("Enter")
    expect(runs).to_have_count(before + 1)
    run = runs.nth(before)
    expect(run.get_by_test_id("user-message").locator(".msg-text")).to_have_text(text)
    expect(composer).to_have_value("")
    return run


def wait_run(run: Any, status: str) -> None:
    expect(run).to_have_attribute("data-status", status)


def tool_card(run: Any, name: str) -> Any:
    return run.locator(f'[data-testid="tool-card"][data-tool-name="{name}"]')


def answer(run: Any) -> Any:
    return run.get_by_test_id("assistant-message")


def transcript_snapshot(page: Any) -> list[dict[str, Any]]:
    """What each exchange shows: its id, status, question, answers and tool cards."""
    snapshot: list[dict[str, Any]] = page.evaluate(
        """() => Array.from(document.querySelectorAll('[data-testid="run"]'), (run) => ({
            id: run.dataset.runId,
            status: run.dataset.status,
            input: run.querySelector('[data-testid="user-message"] .msg-text').innerText,
            answers: Array.from(run.querySelectorAll('[data-testid="assistant-message"]'),
                                (m) => m.innerText),
            tools: Array.from(run.querySelectorAll('[data-testid="tool-card"]'),
                              (c) => `${c.dataset.toolName}:${c.dataset.state}`),
        }))"""
    )
    return snapshot


# Records the page's WebSockets (URL, frames of interest, close code) in
# window.__sockets, so that tests can wait on them instead of sleeping.
_TRACK_SOCKETS = """
(() => {
  const Native = window.WebSocket;
  window.__sockets = [];
  window.WebSocket = class extends Native {
    constructor(url, protocols) {
      super(url, protocols);
      const record = { url: String(url), frames: [], closeCode: null };
      window.__sockets.push(record);
      this.addEventListener("message", (message) => {
        try {
          const frame = JSON.parse(message.data);
          if (frame.type !== "event" && frame.type !== "delta") record.frames.push(frame.type);
        } catch (error) {
          record.frames.push("unparsable");
        }
      });
      this.addEventListener("close", (event) => { record.closeCode = event.code; });
    }
  };
})();
"""


def track_sockets(page: Any) -> None:
    """Call before the page loads."""
    page.add_init_script(_TRACK_SOCKETS)


def sockets(page: Any) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = page.evaluate("() => window.__sockets")
    return records


def wait_socket_frame(page: Any, path: str, frame: str, nth: int = 0) -> None:
    """Waits until the ``nth`` socket opened to ``path`` has received a ``frame``."""
    page.wait_for_function(
        """([path, frame, nth]) => {
            const mine = window.__sockets.filter((s) => new URL(s.url).pathname === path);
            return mine.length > nth && mine[nth].frames.includes(frame);
        }""",
        arg=[path, frame, nth],
    )
