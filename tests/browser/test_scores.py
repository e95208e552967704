"""A reviewer scores a run from its timeline, in a real browser: the form refuses
what is no score and says why in place, a score added shows in the run's scores
(and in the API, as a staff score), and its author changes it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.helpers import expect, login
from tests.browser.server import PASSWORD, Api, LiveServer

pytestmark = pytest.mark.browser

# A staff operator who may read and score every run.
_REVIEWER = f"""
from django.contrib.auth import get_user_model
users = get_user_model()
if not users.objects.filter(username="maria").exists():
    users.objects.create_user("maria", password={PASSWORD!r}, is_staff=True, is_superuser=True)
"""


def test_a_reviewer_adds_a_score_in_the_timeline(
    new_context: Any, alice_api: Api, goaai_server: LiveServer
) -> None:
    goaai_server.shell(_REVIEWER)
    session_id = alice_api.new_session("To review")
    run_id = alice_api.start_run(session_id, "echo the capital of Australia is Sydney")["id"]
    alice_api.wait_run(run_id, {"completed"})

    reviewer = new_context(None).new_page()
    login(reviewer, "maria")
    reviewer.goto(f"/admin/runs_app/run/{run_id}/timeline/")
    panel = reviewer.locator("section#tl-scores")
    expect(panel).to_contain_text("No scores yet.")

    adding = reviewer.get_by_test_id("score-form")
    adding.get_by_label("Name").fill("feedback")
    adding.get_by_label("Kind").select_option("boolean")
    adding.get_by_label("Value").fill("no")
    adding.get_by_role("button", name="Add score").click()

    # Refused in place: the form says why and keeps what was typed.
    adding = reviewer.get_by_test_id("score-form")
    expect(adding).to_contain_text("`feedback` is the name of users' thumbs up or down")
    expect(adding.get_by_label("Name")).to_have_value("feedback")

    adding.get_by_label("Name").fill("accuracy")
    adding.get_by_label("Value").fill("false")
    adding.get_by_label("Comment").fill("Canberra is the capital.")
    adding.get_by_role("button", name="Add score").click()

    expect(reviewer.locator("ul.messagelist")).to_contain_text("Score accuracy = false added.")
    row = panel.get_by_test_id("score")
    expect(row).to_have_count(1)
    for shown in ("accuracy", "false", "boolean", "staff", "maria", "Canberra is the capital."):
        expect(row).to_contain_text(shown)
    [score] = alice_api.get(f"runs/{run_id}/scores/")["results"]
    assert (score["name"], score["value"], score["source"], score["author"]) == (
        "accuracy",
        False,
        "staff",
        "maria",
    )

    # Its author changes it from the same row.
    row.get_by_text("Change", exact=True).click()
    changing = row.get_by_role("form", name="Change score accuracy")
    changing.get_by_label("Value").fill("true")
    changing.get_by_role("button", name="Save").click()

    expect(reviewer.locator("ul.messagelist")).to_contain_text("Score changed to accuracy = true.")
    expect(panel.get_by_test_id("score").locator(".tl-score-value")).to_have_text("true")
    assert alice_api.get(f"runs/{run_id}/scores/")["results"][0]["value"] is True
