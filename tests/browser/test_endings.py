"""Every ending told, in a real browser: who stopped a run (you, an operator, your
next message), a wait that its run's end cut short closed in the admin timeline,
and a server killed mid-answer telling "Interrupted — resuming" at once once it is
back, then giving the resumed answer, once."""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from goaai.runtime.models.scripted import STORY
from tests.browser.helpers import answer, expect, login, open_chat, send, tool_card, wait_run
from tests.browser.server import PASSWORD, Api, LiveServer

pytestmark = pytest.mark.browser

# A staff operator, who may cancel anyone's run.
_OPERATOR = f"""
from django.contrib.auth import get_user_model
users = get_user_model()
if not users.objects.filter(username="maria").exists():
    users.objects.create_user("maria", password={PASSWORD!r}, is_staff=True, is_superuser=True)
"""
STORY_MS = 40_000


def _run_id(run: Any) -> str:
    return str(run.get_attribute("data-run-id"))


def _waits(page: Any) -> Any:
    return page.locator("section.tl-waits")


def test_an_operator_cancel_closes_the_wait_and_the_chat_says_who(
    page: Any, new_context: Any, alice_api: Api, goaai_server: LiveServer
) -> None:
    goaai_server.shell(_OPERATOR)
    session_id = alice_api.new_session("Waiting for me")
    open_chat(page, session_id)
    run = send(page, "forget everything")
    expect(tool_card(run, "memory_forget_all")).to_have_attribute("data-state", "awaiting_approval")
    wait_run(run, "awaiting_input")

    operator = new_context(None).new_page()
    login(operator, "maria")
    operator.goto(f"/admin/runs_app/run/{_run_id(run)}/timeline/")
    expect(_waits(operator)).to_contain_text("still waiting")
    operator.get_by_role("button", name="Cancel run").click()

    # The wait is over: when, after how long and why, and its counter stops.
    waits = _waits(operator)
    expect(waits).to_contain_text(re.compile(r"Canceled after [\d.]+ (ms|s): Stopped by an"))
    expect(waits).to_contain_text("Stopped by an operator (maria)")
    expect(waits).not_to_contain_text("still waiting")
    waited = waits.locator("td.tl-duration").inner_text()
    time.sleep(1.2)
    operator.reload()
    expect(waits.locator("td.tl-duration")).to_have_text(waited)
    expect(operator.locator(".tl-banner-canceled")).to_contain_text(
        "Stopped by an operator (maria)"
    )
    expect(operator.locator("#tl-root")).to_contain_text("memory_forget_all · wait ended")
    # The same in the session's timeline.
    operator.goto(f"/admin/sessions_app/session/{session_id}/timeline/")
    expect(_waits(operator)).to_contain_text("Stopped by an operator (maria)")
    expect(_waits(operator)).not_to_contain_text("still waiting")

    # Alice's chat says who stopped her run, live.
    wait_run(run, "canceled")
    expect(run.get_by_test_id("run-status")).to_have_text("Stopped by an operator (maria)")
    expect(tool_card(run, "memory_forget_all")).to_have_attribute("data-state", "canceled")


def test_the_chat_tells_a_stop_of_yours_from_a_message_that_replaced_the_run(
    page: Any, alice_api: Api
) -> None:
    open_chat(page, alice_api.new_session("Stops"))
    story = send(page, "tell me a story")
    expect(answer(story)).to_contain_text("Once upon a time")
    page.get_by_test_id("stop-button").click()
    wait_run(story, "canceled")
    expect(story.get_by_test_id("run-status")).to_have_text("Stopped by you")

    waiting = send(page, "forget everything")
    wait_run(waiting, "awaiting_input")
    # A new message instead of a decision replaces the waiting request.
    replacing = send(page, "echo never mind")
    wait_run(waiting, "canceled")
    expect(waiting.get_by_test_id("run-status")).to_have_text("Replaced by your next message")
    wait_run(replacing, "completed")
    run = alice_api.get(f"runs/{_run_id(waiting)}/")
    assert run["stopped_by"] == {"kind": "superseded", "user": "alice", "rule": None}

    # A reload tells the same from the record.
    page.reload()
    expect(page.get_by_test_id("run").nth(0).get_by_test_id("run-status")).to_have_text(
        "Stopped by you"
    )
    expect(page.get_by_test_id("run").nth(1).get_by_test_id("run-status")).to_have_text(
        "Replaced by your next message"
    )


# A server that crashes mid-answer. A server of its own, with a lease as long as in
# production: only telling that the dead server's process has ended can take its
# runs up within seconds.


@pytest.fixture(scope="module")
def crashing_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = LiveServer(
        workdir=tmp_path_factory.mktemp("goaai-crash"),
        extra_env={"GOAAI_RUN_LEASE_SECONDS": "60", "GOAAI_REAPER_INTERVAL": "15"},
    )
    server.prepare()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_a_server_killed_mid_answer_says_interrupted_at_once_then_resumes(
    playwright_browser: Any, crashing_server: LiveServer
) -> None:
    api = Api.login(crashing_server, "alice")
    session_id = api.new_session("A story, interrupted")
    context = playwright_browser.new_context(base_url=crashing_server.url)
    try:
        page = context.new_page()
        login(page, "alice")
        open_chat(page, session_id)
        run = send(page, "tell me a story")
        message = answer(run)
        # Two seconds in: some of the story is checkpointed, most is still to come.
        expect(message).to_contain_text("Once upon a time")
        time.sleep(2)
        partial = message.inner_text()
        assert 0 < len(partial) < len(STORY)

        crashing_server.kill()
        crashing_server.start()
        restarted, restarted_at = time.monotonic(), dt.datetime.now(tz=dt.UTC)

        steps = run.get_by_test_id("run-steps")
        expect(steps).to_contain_text(
            "Interrupted — resuming (the worker's process ended)", timeout=5_000
        )
        assert time.monotonic() - restarted < 5
        # Then the resumed answer, told once: the partial text gave way to it.
        expect(run).to_have_attribute("data-status", "completed", timeout=STORY_MS)
        expect(answer(run)).to_have_count(1)
        expect(answer(run)).to_have_text(STORY)
        record = api.get(f"runs/{_run_id(run)}/")
        assert record["output"] == STORY
        assert [turn["interruption"] for turn in record["turns"]] == ["crashed", ""]
        assert record["turns"][0]["response"]["text"] in STORY
        events = api.get(f"sessions/{session_id}/events/?after=0")["results"]
        (interrupted,) = [e for e in events if e["type"] == "run.interrupted"]
        assert interrupted["data"]["cause"] == "process_ended"
        # Told by the server as it started, not once the dead server's lease ran out.
        told_at = dt.datetime.fromisoformat(interrupted["created_at"])
        assert (told_at - restarted_at).total_seconds() < 5
    finally:
        context.close()
