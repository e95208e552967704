"""The chat page shows what a run cost, a model call retried, a reply cut off by the
length limit and the model's reasoning, live and after a reload.

The agent's model (tests/browser/flaky_agent.py) is rate limited on its first
attempt after a few words, and answers on the second with reasoning, cached prompt
tokens and a reply cut off by its output limit; its model has a price. It runs on a
goaai of its own, started with that agent."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser.conftest import VIEWPORT, WAIT_MS
from tests.browser.flaky_agent import REASONING
from tests.browser.helpers import answer, expect, login, open_chat, send, wait_connected, wait_run
from tests.browser.server import Api, LiveServer

pytestmark = pytest.mark.browser

# $2 per million input tokens, $8 output, $0.5 read from the cache: the answer's
# 1,200 + 4,000 cached + 300 out cost $0.0068.
_PRICE = """
import datetime as dt
from decimal import Decimal
from django.utils import timezone
from runs_app.models import ModelPrice
ModelPrice.objects.create(
    profile="flaky", model="v1", effective_from=timezone.now() - dt.timedelta(days=1),
    input_per_million=Decimal("2"), output_per_million=Decimal("8"),
    cached_input_per_million=Decimal("0.5"),
)
"""
USAGE_LINE = "5,500 tokens (1,200 in · 4,000 cached · 300 out) · $0.0068"
ANSWER = "The answer starts well but runs out of ro"


@pytest.fixture(scope="module")
def flaky_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = LiveServer(
        workdir=tmp_path_factory.mktemp("goaai-flaky"),
        extra_env={"GOAAI_AGENTS": "tests.browser.flaky_agent.FLAKY"},
    )
    server.prepare()
    server.shell(_PRICE)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def flaky_page(playwright_browser: Any, flaky_server: LiveServer) -> Iterator[Any]:
    """Alice, signed in on that server; the page must keep to its
    Content-Security-Policy."""
    assert shutil.which("chromium")
    context = playwright_browser.new_context(base_url=flaky_server.url, viewport=VIEWPORT)
    context.set_default_timeout(WAIT_MS)
    violations: list[str] = []
    page = context.new_page()
    page.on(
        "console",
        lambda message: (
            violations.append(message.text) if "Content Security Policy" in message.text else None
        ),
    )
    login(page, "alice")
    try:
        yield page
    finally:
        context.close()
    assert violations == []


def test_a_retried_answer_cut_off_by_the_length_limit_with_its_reasoning_and_cost(
    flaky_page: Any, flaky_server: LiveServer
) -> None:
    page = flaky_page
    alice = Api.login(flaky_server, "alice")
    open_chat(page, alice.new_session("Flaky", agent="flaky"))

    run = send(page, "tell me everything")
    message = answer(run)
    # The first attempt streams a few words, then the provider refuses it.
    expect(message).to_contain_text("Half a thought")
    expect(run.get_by_test_id("run-status")).to_contain_text("Retrying in 2", timeout=WAIT_MS)
    # The words of the failed attempt went when the retry was announced, before the
    # next attempt (two seconds later) wrote any.
    assert "Half" not in message.inner_text()
    expect(run.get_by_test_id("run-status")).to_contain_text("the provider is rate limiting us")

    wait_run(run, "completed")
    expect(message.locator(".msg-text")).to_have_text(ANSWER)
    expect(run.get_by_test_id("cutoff-tag")).to_have_text("cut off by the length limit")
    expect(run.get_by_test_id("run-usage")).to_have_text(USAGE_LINE)
    # The reasoning comes first, folded.
    reasoning = run.get_by_test_id("reasoning")
    expect(reasoning).to_be_visible()
    expect(reasoning.get_by_test_id("reasoning-text")).to_be_hidden()
    assert run.locator(".run-body").inner_text().startswith("Reasoning")
    reasoning.locator("summary").click()
    expect(reasoning.get_by_test_id("reasoning-text")).to_have_text(REASONING)
    # The step list says what happened.
    run.get_by_test_id("run-status").click()
    steps = run.get_by_test_id("run-steps")
    expect(steps).to_contain_text("s: the provider is rate limiting us")
    # The provider's own words are for operators, not in the chat.
    expect(steps).not_to_contain_text("429")
    expect(steps).to_contain_text("(cut off by the length limit)")

    # The record says the same after a reload.
    page.reload()
    wait_connected(page)
    reloaded = page.get_by_test_id("run").nth(0)
    wait_run(reloaded, "completed")
    expect(answer(reloaded).locator(".msg-text")).to_have_text(ANSWER)
    expect(reloaded.get_by_test_id("cutoff-tag")).to_be_visible()
    expect(reloaded.get_by_test_id("run-usage")).to_have_text(USAGE_LINE)
    expect(reloaded.get_by_test_id("reasoning")).to_be_visible()
    expect(reloaded.get_by_test_id("reasoning-text")).to_have_text(REASONING, use_inner_text=False)
    reloaded.get_by_test_id("run-status").click()
    expect(reloaded.get_by_test_id("run-steps")).to_contain_text("Retrying in 2")
    assert "Half" not in reloaded.inner_text()
