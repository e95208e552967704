"""A message typed while the agent answers: queued behind the answer (the default),
refused (an agent that takes one message at a time), or stopping the answer (an
agent told to interrupt). The answer is the scripted story, which streams for
several seconds at a reading pace."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.helpers import answer, expect, open_chat, send, wait_run
from tests.browser.server import Api, LiveServer

pytestmark = pytest.mark.browser

# The story streams for about nine seconds; a loaded machine takes longer.
STORY_MS = 40_000
# Agents kept as data, on the shared server: the assistant, with another policy.
_AGENTS = """
from goaai.runtime.agents import ASSISTANT
from runs_app.agents import agent_save
base = {k: v for k, v in ASSISTANT.as_dict().items() if k != "id"}
for agent_id, multitask in (("one-at-a-time", "reject"), ("interrupting", "interrupt")):
    agent_save(agent_id, {**base, "conversation": {"multitask": multitask}}, by=None)
"""


@pytest.fixture(scope="module")
def agents(goaai_server: LiveServer) -> None:
    goaai_server.shell(_AGENTS)


def _request_text(run: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content", "")) for m in run["turns"][0]["request_messages"])


def _story_started(page: Any) -> Any:
    story = send(page, "tell me a story")
    expect(answer(story)).to_contain_text("Once upon a time")
    return story


def test_a_message_typed_while_the_story_streams_is_queued_then_answered_after_it(
    page: Any, alice_api: Api
) -> None:
    from goaai.runtime.models.scripted import STORY

    session = alice_api.new_session("Queued")
    open_chat(page, session)
    story = _story_started(page)
    # Stop stays, and so does Send; the note says what sending now does.
    expect(page.get_by_test_id("stop-button")).to_be_visible()
    expect(page.get_by_test_id("send-button")).to_be_visible()
    expect(page.get_by_test_id("composer-note")).to_contain_text("queued")

    queued = send(page, "echo hi")

    expect(queued.get_by_test_id("run-status")).to_have_text(
        "Queued — starts when the current answer finishes"
    )
    expect(queued).to_have_attribute("data-queued", "true")
    expect(queued.get_by_test_id("cancel-queued")).to_be_visible()
    assert story.get_attribute("data-status") == "running"
    expect(story).to_have_attribute("data-status", "completed", timeout=STORY_MS)
    wait_run(queued, "completed")
    expect(answer(queued)).to_have_text("hi")
    expect(queued).to_have_attribute("data-queued", "false")
    expect(queued.get_by_test_id("cancel-queued")).to_be_hidden()
    expect(answer(story)).to_have_text(STORY)

    # It started once the story had ended, and its model was shown the story.
    first = alice_api.get(f"runs/{story.get_attribute('data-run-id')}/")
    second = alice_api.get(f"runs/{queued.get_attribute('data-run-id')}/")
    assert (second["multitask"], second["queued_behind"]) == ("enqueue", None)
    assert second["started_at"] >= first["ended_at"]
    assert STORY[:60] in _request_text(second)


def test_a_queued_message_can_be_taken_back_before_it_starts(page: Any, alice_api: Api) -> None:
    open_chat(page, alice_api.new_session("Taken back"))
    story = _story_started(page)
    queued = send(page, "echo never")

    queued.get_by_test_id("cancel-queued").click()

    wait_run(queued, "canceled")
    expect(queued.get_by_test_id("run-status")).to_have_text("Stopped by you")
    assert story.get_attribute("data-status") == "running"
    page.get_by_test_id("stop-button").click()
    wait_run(story, "canceled")
    run = alice_api.get(f"runs/{queued.get_attribute('data-run-id')}/")
    assert (run["status"], run["started_at"], run["turns"]) == ("canceled", None, [])


def test_an_agent_that_takes_one_message_at_a_time_refuses_clearly(
    page: Any, alice_api: Api, agents: None
) -> None:
    open_chat(page, alice_api.new_session("Strict", agent="one-at-a-time"))
    story = _story_started(page)
    expect(page.get_by_test_id("composer-note")).to_contain_text("one message at a time")
    composer = page.get_by_test_id("composer")

    composer.fill("echo hi")
    composer.press("Enter")

    expect(page.get_by_test_id("composer-error")).to_contain_text(
        "Not sent: the agent is still answering"
    )
    # Nothing was sent: the words stay in the box, the story goes on.
    expect(composer).to_have_value("echo hi")
    expect(page.get_by_test_id("run")).to_have_count(1)
    assert story.get_attribute("data-status") == "running"

    # Once the story is over the same message goes through.
    expect(story).to_have_attribute("data-status", "completed", timeout=STORY_MS)
    composer.press("Enter")
    expect(page.get_by_test_id("run")).to_have_count(2)
    later = page.get_by_test_id("run").nth(1)
    wait_run(later, "completed")
    expect(answer(later)).to_have_text("hi")
    expect(page.get_by_test_id("composer-error")).to_be_hidden()


def test_an_interrupting_agent_stops_the_story_for_the_new_message(
    page: Any, alice_api: Api, agents: None
) -> None:
    from goaai.runtime.models.scripted import STORY

    open_chat(page, alice_api.new_session("Eager", agent="interrupting"))
    story = _story_started(page)
    expect(page.get_by_test_id("composer-note")).to_contain_text("stops the current answer")

    now = send(page, "echo hi")

    wait_run(story, "canceled")
    expect(story.get_by_test_id("stopped-tag")).to_be_visible()
    wait_run(now, "completed")
    expect(answer(now)).to_have_text("hi")
    # The stopped story keeps what it had said, on screen and in its record.
    shown = answer(story).inner_text().replace("stopped", "").strip()
    assert shown.startswith("Once upon a time")
    assert len(shown) < len(STORY)
    stopped = alice_api.get(f"runs/{story.get_attribute('data-run-id')}/")
    assert stopped["output"].startswith("Once upon a time")
    assert len(stopped["output"]) < len(STORY)
    second = alice_api.get(f"runs/{now.get_attribute('data-run-id')}/")
    assert second["multitask"] == "interrupt"
    assert second["started_at"] >= stopped["ended_at"]
