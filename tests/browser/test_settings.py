"""The settings page in a real browser: an API token made there works for a script
(a plain HTTP request with it) until it is revoked there, and single-key shortcuts
turned off there do nothing on the chat page."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from tests.browser.helpers import expect, open_chat

pytestmark = pytest.mark.browser


def status_with_token(base: str, token: str) -> int:
    """What a script holding ``token`` gets for GET /api/v1/sessions/ (like curl)."""
    request = urllib.request.Request(  # noqa: S310 (http to the test server)
        f"{base}/api/v1/sessions/",
        headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=15) as answer:  # noqa: S310
            json.loads(answer.read())
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


@pytest.fixture
def shortcuts_back_on(alice_api) -> Iterator[None]:
    """The other tests expect Alice's shortcuts on: they are turned on again after."""
    yield
    alice_api.call("PATCH", "me/preferences/", {"shortcuts_enabled": True, "time_zone": ""})


def test_a_token_made_on_the_settings_page_works_until_revoked_there(page, goaai_server):
    page.goto("/")
    page.get_by_label("Account menu for alice").click()
    page.get_by_test_id("settings-link").click()
    expect(page.get_by_role("heading", name="Settings", exact=True)).to_be_visible()

    page.get_by_test_id("token-name").fill("browser report")
    page.get_by_test_id("token-expires-in").select_option("7")
    page.get_by_test_id("create-token").click()

    value = page.get_by_test_id("token-value")
    expect(value).to_be_visible()
    token = value.inner_text()
    assert token.startswith("goa_")
    expect(page.get_by_role("button", name="Copy token")).to_be_focused()
    row = page.get_by_test_id("token-row").filter(has_text="browser report")
    expect(row).to_have_count(1)
    assert status_with_token(goaai_server.url, token) == 200

    # Shown once: the page does not show it again.
    page.goto("/settings/")
    expect(page.get_by_test_id("token-value")).to_have_count(0)
    assert token not in page.content()
    expect(row.locator("td").nth(3)).to_contain_text(":")  # last used: just now

    row.get_by_test_id("revoke-token").click()
    dialog = page.get_by_test_id("confirm-dialog")
    expect(dialog).to_be_visible()
    page.get_by_test_id("confirm-ok").click()

    expect(page.get_by_test_id("settings-message")).to_contain_text("Revoked “browser report”")
    expect(page.get_by_test_id("token-row").filter(has_text="browser report")).to_have_count(0)
    assert status_with_token(goaai_server.url, token) == 401


def test_shortcuts_turned_off_do_nothing(page, alice_api, shortcuts_back_on):
    session = alice_api.new_session("Shortcuts")
    open_chat(page, session)
    drawer = page.get_by_test_id("memory-panel")
    # On: m opens the memory drawer (outside any field).
    page.get_by_test_id("transcript").focus()
    page.keyboard.press("m")
    expect(drawer).to_be_visible()
    page.keyboard.press("Escape")
    expect(drawer).to_be_hidden()

    page.goto("/settings/")
    page.get_by_test_id("shortcuts-enabled").uncheck()
    page.get_by_test_id("time-zone").select_option("Asia/Tokyo")
    page.get_by_test_id("save-preferences").click()
    expect(page.get_by_test_id("settings-message")).to_contain_text("saved")
    expect(page.get_by_test_id("shortcuts-enabled")).not_to_be_checked()
    expect(page.get_by_test_id("time-zone")).to_have_value("Asia/Tokyo")
    assert alice_api.get("me/preferences/")["shortcuts_enabled"] is False

    open_chat(page, session)
    expect(page.locator("body")).to_have_attribute("data-shortcuts", "off")
    page.get_by_test_id("transcript").focus()
    for key in ("m", "?", "i", "/"):
        page.keyboard.press(key)
    page.keyboard.press("n")
    page.wait_for_timeout(300)  # what a shortcut would have done has had time to happen
    expect(drawer).to_be_hidden()
    expect(page.get_by_test_id("shortcuts-dialog")).to_be_hidden()
    expect(page.get_by_test_id("composer")).not_to_be_focused()
    assert page.url.endswith(f"/sessions/{session}/")
    # The keys that are not single characters still work: Shift+Esc focuses the box.
    page.keyboard.press("Shift+Escape")
    expect(page.get_by_test_id("composer")).to_be_focused()
    # And the shortcut sheet, opened with its button, says they are off.
    page.get_by_role("button", name="Keyboard shortcuts").click()
    expect(page.get_by_test_id("shortcuts-off-note")).to_be_visible()
