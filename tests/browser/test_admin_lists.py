"""The console's lists in Chromium at 1440 by 900, as the operator who reviewed them
saw them: with a hundred runs, the runs, tool calls and memory lists show one line
a row and no horizontal scrolling, the copy button beside a short id copies the
whole id, and a run opens at its timeline, whose "Raw record" opens its fields."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.browser.helpers import expect

pytestmark = pytest.mark.browser

VIEWPORT = {"width": 1440, "height": 900}
PASSWORD = "wonderland-42"

# An operator, and the runs of a busy month: a hundred, with their tool calls and
# memory; the longest names a row may hold (model, owner, input) on some of them.
_SEED = f"""
from django.contrib.auth import get_user_model
from django.core.management import call_command
from runs_app.models import Run
users = get_user_model()
if not users.objects.filter(username="lena").exists():
    users.objects.create_user("lena", password={PASSWORD!r}, is_staff=True, is_superuser=True)
if not Run.objects.filter(session__owner__username__startswith="demo-user-").exists():
    call_command("seed_demo", sessions=25, runs_per_session=4, users=2, verbosity=0)
    models = ["scripted", "openai:gpt-4.1-mini", "anthropic:claude-sonnet-4-5-20250929"]
    seeded = Run.objects.filter(session__owner__username__startswith="demo-user-")
    for index, run in enumerate(seeded):
        run.model = models[index % 3]
        if index % 7 == 0:
            run.input = "a message far longer than any column, " * 20
        run.save(update_fields=["model", "input"])
    users.objects.filter(username="demo-user-2").update(username="demo-user-with-a-long-name-2")
"""


@pytest.fixture(scope="module")
def operator_cookies(goaai_server: Any, playwright_browser: Any) -> list[dict[str, Any]]:
    """The seeded database, and the operator's cookies (signed in once)."""
    goaai_server.shell(_SEED, timeout=120)
    context = playwright_browser.new_context(base_url=goaai_server.url)
    try:
        page = context.new_page()
        page.goto("/admin/login/")
        page.get_by_label("Username:").fill("lena")
        page.get_by_label("Password:").fill(PASSWORD)
        page.get_by_role("button", name="Log in").click()
        expect(page.get_by_role("heading", name="Sessions, runs and memory")).to_be_visible()
        cookies: list[dict[str, Any]] = context.cookies()
    finally:
        context.close()
    return cookies


@pytest.fixture
def operator(new_context: Any, operator_cookies: list[dict[str, Any]]) -> Any:
    context = new_context(
        None, viewport=VIEWPORT, permissions=["clipboard-read", "clipboard-write"]
    )
    context.add_cookies(operator_cookies)
    return context.new_page()


def _layout(page: Any) -> dict[str, Any]:
    return page.evaluate(
        """() => {
          const results = document.querySelector("#changelist .results");
          const rows = [...document.querySelectorAll("#result_list tbody tr")];
          const heights = rows.map((row) => row.getBoundingClientRect().height);
          const cell = document.querySelector("#result_list td");
          const line = parseFloat(getComputedStyle(cell).lineHeight);
          return {
            scrollWidth: results.scrollWidth,
            clientWidth: results.clientWidth,
            rows: rows.length,
            tallest: Math.max(...heights),
            lowest: Math.min(...heights),
            line: line,
          };
        }"""
    )


LISTS = [
    ("/admin/runs_app/run/", 100),
    ("/admin/runs_app/toolcall/", 100),
    ("/admin/memory_app/memoryentry/", 10),
    ("/admin/memory_app/memoryrevision/", 10),
]


def test_the_lists_are_one_line_a_row_without_scrolling_sideways(operator):
    for path, at_least in LISTS:
        operator.goto(path)
        expect(operator.locator("#result_list")).to_be_visible()
        layout = _layout(operator)
        assert layout["rows"] >= at_least, (path, layout)
        assert layout["scrollWidth"] <= layout["clientWidth"], (path, layout)
        # One line of text a row: every row as tall as the lowest, under two lines.
        assert layout["tallest"] - layout["lowest"] <= 1, (path, layout)
        assert layout["tallest"] < 2 * layout["line"] + 16, (path, layout)


def test_the_copy_button_copies_the_whole_id(operator):
    operator.goto("/admin/runs_app/run/")
    cell = operator.locator("#result_list tbody tr").first.locator("td.field-run_id")
    link = cell.locator("a.goaai-id")
    whole = link.get_attribute("title")
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", whole)
    expect(link).to_have_text(whole[:8])
    button = cell.get_by_role("button", name=f"Copy run id {whole[:8]}")
    button.click()
    expect(button).to_have_attribute("data-state", "copied")
    assert operator.evaluate("navigator.clipboard.readText()") == whole
    # The row was not ticked by the click, nor the form sent.
    expect(
        operator.locator("#result_list tbody tr").first.locator("input.action-select")
    ).not_to_be_checked()
    assert operator.url.endswith("/admin/runs_app/run/")


def test_a_run_opens_at_its_timeline_and_its_raw_record_one_click_further(operator):
    operator.goto("/admin/runs_app/run/")
    link = operator.locator("#result_list tbody tr").first.locator("td.field-run_id a.goaai-id")
    whole = link.get_attribute("title")
    link.click()
    operator.wait_for_url(re.compile(rf".*/admin/runs_app/run/{whole}/timeline/$"))
    operator.get_by_test_id("raw-record").click()
    operator.wait_for_url(re.compile(rf".*/admin/runs_app/run/{whole}/change/$"))
    expect(operator.locator("#content")).to_contain_text(whole)
    expect(operator.locator("#content")).not_to_contain_text("Lease owner")


def test_a_tool_call_opens_its_runs_timeline(operator):
    operator.goto("/admin/runs_app/toolcall/")
    run = operator.locator("#result_list tbody tr").first.locator("td.field-run_link a.goaai-id")
    whole = run.get_attribute("title")
    run.click()
    operator.wait_for_url(re.compile(rf".*/admin/runs_app/run/{whole}/timeline/$"))
