"""Screenshots of the operators' console for the README, taken in headless Chromium
at 1440 px: the dashboard, the runs, tool calls and memory lists, a run's timeline.

Run by hand from the project folder (not part of the test suite):

    .venv/bin/python docs/admin_screenshots.py

It starts goaai on daphne with a throwaway SQLite database, seeds four weeks of
synthetic conversations (``manage.py seed_demo``) plus a few live runs, and writes
docs/screenshots/admin-{dashboard,runs,tool-calls,memory,timeline}.png.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from playwright.sync_api import Page, sync_playwright  # noqa: E402

from tests.browser.server import PASSWORD, Api, LiveServer  # noqa: E402

OUT = ROOT / "docs" / "screenshots"
WIDE = {"width": 1440, "height": 900}

_OPERATOR = f"""
from django.contrib.auth import get_user_model
get_user_model().objects.create_superuser("olivia", "olivia@example.com", {PASSWORD!r})
"""


def fill(server: LiveServer) -> str:
    """Seeded weeks, and live runs of today; returns a run with tool calls."""
    server.manage(
        "seed_demo",
        "--sessions",
        "400",
        "--runs-per-session",
        "4",
        "--users",
        "5",
        "--seed",
        "3",
        timeout=600,
    )
    server.shell(_OPERATOR)
    alice = Api.login(server, "alice")
    session = alice.new_session("Numbers")
    chosen = ""
    for text in ("calculate 2 * (3 + 4)", "calculate 1/0", "echo hello", "ask me for my name"):
        run = alice.start_run(session, text)
        done = alice.wait_run(run["id"], {"completed", "failed", "awaiting_input"})
        chosen = chosen or done["id"]
    return chosen


def login(page: Page) -> None:
    page.goto("/admin/login/")
    page.get_by_label("Username").fill("olivia")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url("**/admin/")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="goaai-admin-screenshots-"))
    server = LiveServer(workdir=workdir)
    server.prepare()
    server.start()
    try:
        run_id = fill(server)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=shutil.which("chromium"))
            context = browser.new_context(base_url=server.url, viewport=WIDE)
            context.set_default_timeout(30_000)
            page = context.new_page()
            login(page)
            for name, path in [
                ("dashboard", "/admin/runs_app/run/dashboard/?range=30d"),
                ("runs", "/admin/runs_app/run/"),
                ("tool-calls", "/admin/runs_app/toolcall/"),
                ("memory", "/admin/memory_app/memoryentry/"),
                ("timeline", f"/admin/runs_app/run/{run_id}/timeline/"),
            ]:
                page.goto(path)
                page.wait_for_load_state("networkidle")
                page.screenshot(path=OUT / f"admin-{name}.png", full_page=name == "dashboard")
            browser.close()
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    for path in sorted(OUT.glob("admin-*.png")):
        print(path.relative_to(ROOT))


if __name__ == "__main__":
    main()
