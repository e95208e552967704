"""Screenshots of the main pages for the README, taken in headless Chromium.

Run by hand from the project folder (not part of the test suite):

    .venv/bin/python docs/screenshots.py

It starts goaai on daphne with a throwaway SQLite database, fills it through the
REST API and the browser, and writes docs/screenshots/{session-list,chat,approval,
memory,settings,chat-mobile}.png (1280x800 desktop, 375 px wide mobile).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from playwright.sync_api import expect, sync_playwright  # noqa: E402

from tests.browser.helpers import login, open_chat, send, wait_run  # noqa: E402
from tests.browser.server import Api, LiveServer  # noqa: E402

OUT = ROOT / "docs" / "screenshots"
DESKTOP = {"width": 1280, "height": 800}
MOBILE = {"width": 375, "height": 812}

# Older chats, so that the list shows its day groups.
_BACKDATE = """
import datetime as dt
from django.utils import timezone
from sessions_app.models import Session
for session_id, days in {ages!r}.items():
    then = timezone.now() - dt.timedelta(days=days)
    Session.objects.filter(pk=session_id).update(created_at=then, last_activity_at=then)
"""


def fill(server: LiveServer, alice: Api) -> dict[str, str]:
    """Chats in several states; returns their ids by name."""
    ids: dict[str, str] = {}
    ages: dict[str, int] = {}
    for name, title, text, status, days in [
        ("homework", "Maths homework", "calculate 2 * (3 + 4)", "completed", 9),
        ("rome", "Trip to Rome", "what time is it in Europe/Rome?", "completed", 3),
        ("intro", "Introductions", "ask me for my name", "awaiting_input", 1),
        ("cleanup", "Cleaning up", "forget everything", "awaiting_input", 0),
    ]:
        ids[name] = alice.new_session(title)
        run = alice.start_run(ids[name], text)
        alice.wait_run(run["id"], {status})
        if name == "intro":
            alice.post(f"runs/{run['id']}/cancel/", {"reason": "changed my mind"})
        if days:
            ages[ids[name]] = days
    server.shell(_BACKDATE.format(ages=ages))
    ids["colours"] = alice.new_session("Colours")
    return ids


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="goaai-screenshots-"))
    server = LiveServer(workdir=workdir)
    server.prepare()
    server.start()
    try:
        alice = Api.login(server, "alice")
        ids = fill(server, alice)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=shutil.which("chromium"))
            context = browser.new_context(base_url=server.url, viewport=DESKTOP)
            context.set_default_timeout(15_000)
            page = context.new_page()
            login(page, "alice")

            # The chat: tool cards and answers.
            open_chat(page, ids["colours"])
            for text in (
                "remember my favourite colour is green",
                "always remember my name is Ada",
                "what is my favourite colour?",
                "calculate 2 * (3 + 4)",
                "echo Answers are **markdown**: `code`, *emphasis* and [links](https://example.com)",
            ):
                wait_run(send(page, text), "completed")
            page.get_by_test_id("transcript").evaluate("(t) => { t.scrollTop = t.scrollHeight; }")
            page.mouse.move(0, 0)
            page.screenshot(path=OUT / "chat.png")

            # The memory drawer.
            page.get_by_test_id("memory-toggle").click()
            expect(page.get_by_test_id("memory-entry")).to_have_count(2)
            page.screenshot(path=OUT / "memory.png")

            # A tool call waiting for approval.
            open_chat(page, ids["cleanup"])
            expect(page.get_by_test_id("approve-button")).to_be_visible()
            page.screenshot(path=OUT / "approval.png")

            # The settings page.
            page.goto("/settings/")
            page.screenshot(path=OUT / "settings.png")

            # The list of chats.
            page.goto("/")
            expect(page.get_by_test_id("session-item")).to_have_count(len(ids))
            page.screenshot(path=OUT / "session-list.png")

            # The chat on a phone.
            phone = browser.new_context(
                base_url=server.url,
                viewport=MOBILE,
                is_mobile=True,
                has_touch=True,
                storage_state=context.storage_state(),
            )
            mobile = phone.new_page()
            open_chat(mobile, ids["colours"])
            mobile.screenshot(path=OUT / "chat-mobile.png")
            browser.close()
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    for path in sorted(OUT.glob("*.png")):
        print(path.relative_to(ROOT))


if __name__ == "__main__":
    main()
