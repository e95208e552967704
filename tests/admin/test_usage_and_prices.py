"""Cost in the operators' console: the price table, the cost of runs and sessions in
their changelists, and tokens of each kind, costs, finish reasons, reasoning and
model retries on the timelines."""

from __future__ import annotations

import datetime as dt
import html as html_lib
import re
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from goaai.runtime.types import ModelReply, Usage
from runs_app import services
from runs_app.models import ModelPrice, Run
from sessions_app.models import RunEvent
from tests.factories import (
    ModelPriceFactory,
    RunFactory,
    SessionFactory,
    UserFactory,
    recorded_turn,
)
from tests.permissions import staff_user

pytestmark = pytest.mark.django_db

PRICES = reverse("admin:runs_app_modelprice_changelist")
ADD_PRICE = reverse("admin:runs_app_modelprice_add")


def text_of(response) -> str:
    """The page's text, tags and runs of white space squeezed out."""
    plain = re.sub(r"<[^>]+>", " ", response.content.decode())
    return " ".join(html_lib.unescape(plain).split())


@pytest.fixture
def operator(client, staff):
    client.force_login(staff)
    return client


@pytest.fixture
def price():
    return ModelPriceFactory(
        profile="openai",
        model="gpt-4.1",
        input_per_million=Decimal("2"),
        output_per_million=Decimal("8"),
        cached_input_per_million=Decimal("0.5"),
        reasoning_per_million=Decimal("10"),
    )


@pytest.fixture
def priced_run(owner, price):
    """A run whose one turn was retried, cut off by the length limit, with reasoning:
    1000 in, 2000 cached, 300 written to the cache, 400 out of which 150 reasoning;
    $0.0071."""
    run = RunFactory(session=SessionFactory(owner=owner, title="Priced"), status="running")
    turn = services.turn_start(run_id=run.id, index=0, model="openai:gpt-4.1", request_messages=[])
    services.model_retry_record(
        turn_id=turn.id,
        attempt=1,
        error_kind="rate_limited",
        message="429 Too Many Requests",
        delay_seconds=2.1,
    )
    services.turn_complete(
        turn_id=turn.id,
        reply=ModelReply(
            text="The first half of a long answ",
            usage=Usage(1000, 400, 2000, 300, 150),
            model="gpt-4.1-2025-04-14",
            finish_reason="length",
            reasoning="Weigh the <options> first, then answer.",
        ),
        latency_ms=900,
        retries=1,
    )
    services.run_complete(run_id=run.id, output="The first half of a long answ")
    run.refresh_from_db()
    return run


# The price table


def test_operators_add_a_price_and_are_recorded_as_its_author(operator, staff):
    other = UserFactory(username="mallory")

    response = operator.post(
        ADD_PRICE,
        {
            "profile": "anthropic",
            "model": "claude-sonnet-4-5",
            "effective_from_0": "2026-01-01",
            "effective_from_1": "00:00:00",
            "input_per_million": "3",
            "output_per_million": "15",
            "cached_input_per_million": "0.3",
            "cache_write_per_million": "3.75",
            "reasoning_per_million": "",
            # Not a field of the form: whoever saves is the author.
            "created_by": str(other.pk),
        },
    )

    assert response.status_code == 302, response.content.decode()[:2000]
    price = ModelPrice.objects.get(profile="anthropic")
    assert price.created_by == staff
    assert price.cached_input_per_million == Decimal("0.3")
    assert price.reasoning_per_million is None


def test_a_corrected_price_keeps_its_author(operator, price, staff):
    author = UserFactory(username="dana")
    ModelPrice.objects.filter(pk=price.pk).update(created_by=author)
    url = reverse("admin:runs_app_modelprice_change", args=[price.pk])
    moment = timezone.localtime(price.effective_from)

    response = operator.post(
        url,
        {
            "profile": "openai",
            "model": "gpt-4.1",
            "effective_from_0": moment.strftime("%Y-%m-%d"),
            "effective_from_1": moment.strftime("%H:%M:%S"),
            "input_per_million": "2.5",
            "output_per_million": "8",
        },
    )

    assert response.status_code == 302
    price.refresh_from_db()
    assert price.input_per_million == Decimal("2.5")
    assert price.created_by == author


def test_the_price_list_filters_by_profile_and_model_and_searches(operator, staff):
    ModelPriceFactory(profile="openai", model="gpt-4.1", created_by=staff)
    ModelPriceFactory(profile="openai", model="o3")
    ModelPriceFactory(profile="anthropic", model="claude-haiku")

    def models(**query) -> list[str]:
        page = operator.get(PRICES, query)
        assert page.status_code == 200
        return sorted(re.findall(r'class="field-model">([^<]+)<', page.content.decode()))

    assert models() == ["claude-haiku", "gpt-4.1", "o3"]
    assert models(profile="openai") == ["gpt-4.1", "o3"]
    assert models(model="o3") == ["o3"]
    assert models(q="haiku") == ["claude-haiku"]
    page = operator.get(PRICES)
    assert "charlie" in page.content.decode()  # who entered it


def test_only_staff_with_the_permissions_may_add_or_change_prices(client, price):
    auditor = staff_user("erin", perms=("runs_app.view_modelprice",))
    pricer = staff_user("paul", perms=("runs_app.view_modelprice", "runs_app.add_modelprice"))
    change = reverse("admin:runs_app_modelprice_change", args=[price.pk])

    client.force_login(auditor)
    assert client.get(PRICES).status_code == 200
    assert client.get(ADD_PRICE).status_code == 403
    page = client.get(change)
    assert page.status_code == 200
    assert 'name="input_per_million"' not in page.content.decode()  # read only

    client.force_login(pricer)
    assert client.get(ADD_PRICE).status_code == 200
    assert client.post(change, {"profile": "x"}).status_code == 403


def test_the_price_list_takes_the_same_queries_for_1_and_many_prices(operator, staff):
    counts = []
    for added in (1, 5):
        for index in range(added):
            ModelPriceFactory(model=f"m{added}-{index}", created_by=staff)
        with CaptureQueriesContext(connection) as captured:
            assert operator.get(PRICES).status_code == 200
        counts.append(len(captured.captured_queries))
    assert counts[0] == counts[1], counts


# Changelists


def test_the_run_list_shows_each_runs_cost_or_unknown(operator, owner, priced_run):
    unpriced = RunFactory(session=priced_run.session, status="running")
    recorded_turn(unpriced, 0, Usage(10, 5), model="scripted")
    RunFactory(session=priced_run.session)  # no turns: nothing spent

    page = operator.get(reverse("admin:runs_app_run_changelist"))
    costs = re.findall(r'class="field-cost_column">([^<]*)<', page.content.decode())

    assert sorted(costs) == ["$0", "$0.0071", "unknown"]


def test_a_runs_page_shows_every_kind_of_token_and_its_cost(operator, priced_run):
    page = text_of(operator.get(reverse("admin:runs_app_run_change", args=[priced_run.pk])))

    for label, value in [
        ("Cached input tokens:", "2000"),
        ("Cache write tokens:", "300"),
        ("Reasoning tokens:", "150"),
        ("Cost:", "$0.0071"),
    ]:
        assert f"{label} {value}" in page


def test_the_session_list_and_page_show_the_total_cost(operator, owner, priced_run, price):
    second = RunFactory(session=priced_run.session, status="running")
    recorded_turn(second, 0, Usage(500, 100))  # $0.0018
    unpriced = SessionFactory(owner=owner, title="Offline")
    recorded_turn(RunFactory(session=unpriced, status="running"), 0, Usage(5, 5), model="scripted")
    SessionFactory(owner=owner, title="Empty")

    page = operator.get(reverse("admin:sessions_app_session_changelist"))
    costs = re.findall(r'class="field-cost">([^<]*)<', page.content.decode())
    detail = text_of(
        operator.get(reverse("admin:sessions_app_session_change", args=[priced_run.session_id]))
    )

    assert sorted(costs) == ["$0", "$0.0089", "unknown"]
    assert "Total cost: $0.0089" in detail
    assert "2,000 cached" in detail
    assert "150 reasoning" in detail


def test_the_session_list_costs_no_more_queries_with_more_sessions(operator, owner, price):
    counts = []
    for added in (1, 5):
        for _ in range(added):
            run = RunFactory(session=SessionFactory(owner=owner), status="running")
            recorded_turn(run, 0, Usage(10, 1))
        with CaptureQueriesContext(connection) as captured:
            operator.get(reverse("admin:sessions_app_session_changelist"))
        counts.append(len(captured.captured_queries))
        assert not any(
            q["sql"].upper().startswith("SELECT COUNT(") and "LIMIT" not in q["sql"].upper()
            for q in captured.captured_queries
        )
    assert counts[0] == counts[1], counts


# The timelines


def run_timeline(client, run, **query):
    return client.get(reverse("admin:runs_app_run_timeline", args=[run.pk]), query)


def test_the_run_timeline_header_shows_tokens_of_each_kind_and_the_cost(operator, priced_run):
    page = text_of(run_timeline(operator, priced_run))

    assert (
        "Tokens 1000 in · 2000 cached · 300 written to the cache · 400 out (150 reasoning) "
        "· 3700 total" in page
    )
    assert "Cost $0.0071" in page
    assert "cost unknown" not in page


def test_an_unpriced_run_says_its_cost_is_unknown(operator, owner):
    run = RunFactory(session=SessionFactory(owner=owner), status="running")
    recorded_turn(run, 0, Usage(10, 5), model="scripted")

    page = text_of(run_timeline(operator, run))

    assert "Cost unknown (1 turn without a price not counted)" in page


def test_a_turn_shows_its_tokens_cost_finish_reason_and_folded_reasoning(operator, priced_run):
    response = run_timeline(operator, priced_run)
    html = response.content.decode()
    page = text_of(response)

    assert "Finished length: cut off by the length limit" in page
    assert (
        "Tokens 1000 in · 2000 cached · 300 written to the cache · 400 out (150 reasoning) "
        "· 3700 total" in page
    )
    assert "Cost $0.0071" in page
    assert "Retries asked again 1 time after a provider error" in page
    assert "answered by gpt-4.1-2025-04-14" in page
    # The reasoning is folded, and escaped.
    folded = re.search(r'<details class="tl-reasoning">(.*?)</details>', html, re.S)
    assert folded, "the reasoning is in a <details>"
    assert "Weigh the &lt;options&gt; first, then answer." in folded.group(1)
    assert "<options>" not in html
    # The turn's completion says so in its row, and its usage event has the cost.
    assert "turn 0 · 0 tool call(s) · latency 900 ms · cut off by the length limit" in page
    assert (
        "1,000 in · 2,000 cached · 300 written to the cache · 400 out tokens (150 reasoning) "
        "· $0.0071" in page
    )


def test_a_model_retry_is_a_row_of_its_own(operator, priced_run):
    response = run_timeline(operator, priced_run, type="model.retry")
    page = text_of(response)

    assert "Retried after 2.1 s: rate_limited · attempt 1 failed" in page
    # The event is its owner's to read too: the provider's words are not in its
    # row (the turn's panel keeps them for operators, see below).
    assert "attempt 1 failed — 429" not in page
    assert 'tl-badge-retried">model.retry' in response.content.decode()


def test_the_provider_words_of_a_retry_are_kept_for_operators(operator, priced_run):
    turn = priced_run.turns.get()
    assert [(e["attempt"], e["error_kind"], e["message"]) for e in turn.retry_errors] == [
        (1, "rate_limited", "429 Too Many Requests")
    ]
    assert "429" not in str(RunEvent.objects.get(type="model.retry").data)

    page = text_of(run_timeline(operator, priced_run))

    assert "attempt 1 · rate_limited: 429 Too Many Requests" in page


def test_the_compact_view_says_a_turn_was_cut_off(operator, priced_run):
    page = text_of(run_timeline(operator, priced_run, view="compact"))

    assert "turn 0 · openai:gpt-4.1 · cut off by the length limit · 1,000 in" in page


def test_a_turns_reasoning_loads_whole_from_the_payload_endpoint(operator, priced_run):
    turn = priced_run.turns.get()
    url = reverse("admin:runs_app_timeline_payload", args=["turn", str(turn.pk)])

    response = operator.get(url, {"field": "reasoning"})

    assert response.status_code == 200
    assert response.json() == "Weigh the <options> first, then answer."


def test_the_session_timeline_shows_the_total_cost_and_each_runs(operator, priced_run, price):
    second = RunFactory(session=priced_run.session, status="running")
    recorded_turn(second, 0, Usage(500, 100))
    Run.objects.filter(pk=second.pk).update(created_at=timezone.now() + dt.timedelta(seconds=1))

    response = operator.get(
        reverse("admin:sessions_app_session_timeline", args=[priced_run.session_id])
    )
    page = text_of(response)

    assert "Total cost $0.0089" in page
    rows = re.findall(r'<tr class="tl-run-row">(.*?)</tr>', response.content.decode(), re.S)
    costs = [re.search(r'class="tl-cost">([^<]*)<', row).group(1) for row in rows]
    assert costs == ["$0.0071", "$0.0018"]
