"""Redo and fork on the chat page: Retry of a failed answer, Regenerate, Edit an
earlier message, and Fork into a new chat. The transcript shows the branch the
conversation is on; what a redo replaced folds away under it and can be shown."""

from __future__ import annotations

import re
import uuid

import pytest

from tests.browser.helpers import (
    answer,
    expect,
    login,
    send,
    session_id_of,
    wait_connected,
    wait_run,
)

pytestmark = pytest.mark.browser


def new_chat(page, title: str) -> str:
    page.goto("/sessions/new/")
    page.get_by_test_id("agent-assistant").check()
    page.get_by_label("Title").fill(title)
    page.get_by_test_id("start-chat").click()
    page.wait_for_url(re.compile(r".*/sessions/[0-9a-f-]{36}/$"))
    wait_connected(page)
    return session_id_of(page)


def visible_inputs(page) -> list[str]:
    return page.evaluate(
        """() => Array.from(document.querySelectorAll('[data-testid="run"]'))
            .filter((run) => !run.hidden)
            .map((run) => run.querySelector('[data-testid="user-message"] .msg-text').innerText)"""
    )


def test_retry_regenerate_edit_and_fork(new_context):
    page = new_context(None).new_page()
    login(page, "alice")
    new_chat(page, "Branches")
    runs = page.get_by_test_id("run")

    # A failed answer is retried in its place. (A flaky message fails the first time
    # the server sees it: this one is new to it.)
    flaky = f"flaky echo first {uuid.uuid4().hex[:8]}"
    failed = send(page, flaky)
    wait_run(failed, "failed")
    failed.get_by_test_id("retry-button").click()
    expect(runs).to_have_count(2)
    retried = runs.nth(1)
    wait_run(retried, "completed")
    expect(answer(retried)).to_contain_text("first")
    expect(failed).to_be_hidden()
    expect(retried.get_by_test_id("redo-note")).to_contain_text("Retried")
    assert visible_inputs(page) == [flaky]

    # Regenerate the last answer: the old one folds away, and can be shown again.
    second = send(page, "echo second")
    wait_run(second, "completed")
    expect(retried.get_by_test_id("regenerate-button")).to_be_hidden()  # not the last
    second.get_by_test_id("regenerate-button").click()
    expect(runs).to_have_count(4)
    regenerated = runs.nth(3)
    wait_run(regenerated, "completed")
    expect(second).to_be_hidden()
    assert visible_inputs(page) == [flaky, "echo second"]
    regenerated.get_by_test_id("earlier-version").click()
    expect(second).to_be_visible()
    expect(second).to_have_class(re.compile(r"is-off-branch"))
    regenerated.get_by_test_id("earlier-version").click()
    expect(second).to_be_hidden()

    # Edit the first message: the conversation continues from the edited one.
    retried.get_by_test_id("edit-button").click()
    box = retried.get_by_test_id("edit-box")
    expect(box).to_have_value(flaky)
    box.fill("echo edited")
    retried.get_by_test_id("edit-save").click()
    expect(runs).to_have_count(5)
    edited = runs.nth(4)
    wait_run(edited, "completed")
    expect(answer(edited)).to_have_text("edited")
    assert visible_inputs(page) == ["echo edited"]
    expect(edited.get_by_test_id("redo-note")).to_contain_text("Edited")

    # The page rebuilt from the log shows the same branch.
    page.reload()
    wait_connected(page)
    expect(runs).to_have_count(5)
    assert visible_inputs(page) == ["echo edited"]

    # Fork from the edited answer into a new chat that continues from it.
    first_chat = session_id_of(page)
    runs.nth(4).get_by_test_id("fork-button").click()
    page.wait_for_url(lambda url: "/sessions/" in url and first_chat not in url)
    wait_connected(page)
    expect(page.get_by_test_id("chat-title")).to_have_text("Branches (fork)")
    # It shows the conversation it continues, which is the branch it was forked on.
    inherited = page.get_by_test_id("inherited-exchange")
    expect(inherited).to_have_count(1)
    expect(inherited.locator(".msg-user")).to_contain_text("echo edited")
    in_fork = send(page, "echo in the fork")
    wait_run(in_fork, "completed")
