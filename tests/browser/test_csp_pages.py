"""The pages outside the chat under their Content-Security-Policy, in Chromium:
the operators' console (Django's admin and the run timeline) and the API docs page
(Swagger UI) work, and none of them breaks the policy (the ``new_context`` fixture
fails a test whose pages made Chromium report a violation)."""

from __future__ import annotations

import pytest

from tests.browser.helpers import expect, login

pytestmark = pytest.mark.browser

_STAFF = """
from django.contrib.auth import get_user_model
users = get_user_model()
if not users.objects.filter(username="charlie").exists():
    users.objects.create_user("charlie", password="wonderland-42", is_staff=True, is_superuser=True)
"""


def test_the_console_and_the_api_docs_work_under_the_policy(new_context, goaai_server, alice_api):
    goaai_server.shell(_STAFF)
    session = alice_api.new_session("Console check")
    run = alice_api.start_run(session, "calculate 2 * (3 + 4)")
    alice_api.wait_run(run["id"], {"completed"})
    page = new_context(None).new_page()
    page.goto("/admin/login/")
    page.get_by_label("Username:").fill("charlie")
    page.get_by_label("Password:").fill("wonderland-42")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Sessions, runs and memory")).to_be_visible()

    page.goto("/admin/runs_app/run/")
    expect(page.locator("#result_list")).to_contain_text("calculate 2 * (3 + 4)")
    # An action needs the admin's own scripts: "select all" ticks every row.
    page.locator("#action-toggle").check()
    expect(page.locator("input.action-select").first).to_be_checked()

    page.goto(f"/admin/runs_app/run/{run['id']}/timeline/")
    expect(page.locator("body")).to_contain_text("tool_call.succeeded")

    page.goto("/api/v1/docs/")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("goaai API")
    expect(page.locator(".opblock").first).to_be_visible()


def test_the_login_page_says_when_sign_ins_are_locked_out(new_context, goaai_server):
    page = new_context(None).new_page()
    try:
        for _ in range(10):  # GOAAI_LOGIN_FAILURE_LIMIT's default
            page.goto("/accounts/login/")
            page.get_by_label("Username").fill("mallory")
            page.get_by_label("Password").fill("guess")
            page.get_by_role("button", name="Sign in").click()

        expect(page.get_by_test_id("locked-out")).to_contain_text("Too many failed sign-ins")
    finally:
        # The lockout covers this machine's address too: lift it for the other tests
        # (as an operator does, by deleting the attempts in the admin).
        goaai_server.shell(
            "from axes.models import AccessAttempt; AccessAttempt.objects.all().delete()"
        )
    login(page, "alice")
