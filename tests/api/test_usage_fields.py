"""Token usage of each kind, cost, finish reasons and retries on the API's runs,
turns and sessions, and in the OpenAPI schema that describes them."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.cache import cache
from drf_spectacular.generators import SchemaGenerator

from goaai.runtime.types import Usage
from tests.factories import ModelPriceFactory, RunFactory, SessionFactory, recorded_turn

pytestmark = pytest.mark.django_db

RUNS = "/api/v1/runs/"
SESSIONS = "/api/v1/sessions/"


@pytest.fixture(autouse=True)
def _fresh_throttles():
    cache.clear()


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
def session(owner):
    return SessionFactory(owner=owner)


@pytest.fixture
def run(session, price):
    """Two turns: a priced one that was retried twice and cut off by the length
    limit, with reasoning; and one of a model without a price."""
    run = RunFactory(session=session, status="running")
    recorded_turn(
        run,
        0,
        Usage(
            input_tokens=1000,
            output_tokens=400,
            cached_input_tokens=2000,
            cache_write_tokens=300,
            reasoning_tokens=150,
        ),
        text="The first half of a long answ",
        response_model="gpt-4.1-2025-04-14",
        finish_reason="length",
        reasoning="The user wants a long answer; start with the overview.",
        retries=2,
    )
    recorded_turn(run, 1, Usage(10, 5), model="scripted")
    run.refresh_from_db()
    return run


def test_a_run_shows_every_kind_of_token_its_cost_and_its_unpriced_turns(api, run):
    response = api.get(f"{RUNS}{run.pk}/")

    assert response.status_code == 200
    # 1000 x $2 + 2000 x $0.5 + 300 x $2 (cache writes: the input price)
    # + 250 x $8 + 150 x $10 (reasoning), per million.
    assert response.json()["usage"] == {
        "input_tokens": 1010,
        "output_tokens": 405,
        "cached_input_tokens": 2000,
        "cache_write_tokens": 300,
        "reasoning_tokens": 150,
        "total_tokens": 3715,
        "cost": "0.0071",
        "unpriced_turns": 1,
    }


def test_the_run_list_shows_the_same_usage(api, run):
    listed = api.get(RUNS).json()["results"]

    assert [row["usage"] for row in listed] == [api.get(f"{RUNS}{run.pk}/").json()["usage"]]


def test_a_turn_shows_its_usage_cost_finish_reason_reasoning_and_retries(api, run):
    first, second = api.get(f"{RUNS}{run.pk}/").json()["turns"]

    assert first["model"] == "openai:gpt-4.1"
    assert first["response_model"] == "gpt-4.1-2025-04-14"
    assert first["finish_reason"] == "length"
    assert first["truncated"] is True
    assert first["reasoning"] == "The user wants a long answer; start with the overview."
    assert first["retries"] == 2
    assert first["usage"] == {
        "input_tokens": 1000,
        "output_tokens": 400,
        "cached_input_tokens": 2000,
        "cache_write_tokens": 300,
        "reasoning_tokens": 150,
        "total_tokens": 3700,
        "cost": "0.0071",
    }
    assert second["finish_reason"] == "stop"
    assert second["truncated"] is False
    assert second["reasoning"] == ""
    assert second["retries"] == 0
    assert second["usage"]["cost"] is None
    # The turns endpoint shows a turn the same way.
    assert api.get(f"/api/v1/turns/{first['id']}/").json() == {
        key: value for key, value in first.items() if key != "tool_calls"
    }


def test_a_run_whose_turns_all_lack_a_price_has_an_unknown_cost(api, session):
    run = RunFactory(session=session, status="running")
    recorded_turn(run, 0, Usage(10, 5), model="scripted")

    usage = api.get(f"{RUNS}{run.pk}/").json()["usage"]

    assert usage["cost"] is None
    assert usage["unpriced_turns"] == 1


def test_a_run_without_turns_cost_nothing(api, session):
    run = RunFactory(session=session)

    usage = api.get(f"{RUNS}{run.pk}/").json()["usage"]

    assert usage["cost"] == "0"
    assert usage["total_tokens"] == 0


def test_turns_filter_by_session_and_by_reasoning(api, run, other_user):
    bobs = RunFactory(session=SessionFactory(owner=other_user), status="running")
    recorded_turn(bobs, 0, Usage(1, 1), reasoning="Bob's thoughts")

    with_reasoning = api.get(
        "/api/v1/turns/", {"session": str(run.session_id), "has_reasoning": "true"}
    ).json()["results"]
    without = api.get(
        "/api/v1/turns/", {"session": str(run.session_id), "has_reasoning": "false"}
    ).json()["results"]

    assert [t["index"] for t in with_reasoning] == [0]
    assert [t["index"] for t in without] == [1]
    assert api.get("/api/v1/turns/", {"session": str(bobs.session_id)}).json()["results"] == []


# Sessions


def test_a_session_shows_what_its_runs_add_up_to(api, session, run, price):
    second = RunFactory(session=session, status="running")
    recorded_turn(second, 0, Usage(500, 100, 0, 0, 0))
    second.refresh_from_db()

    usage = api.get(f"{SESSIONS}{session.pk}/").json()["usage"]

    assert usage == {
        "input_tokens": 1510,
        "output_tokens": 505,
        "cached_input_tokens": 2000,
        "cache_write_tokens": 300,
        "reasoning_tokens": 150,
        "total_tokens": 4315,
        "cost": str(run.cost + second.cost).rstrip("0"),
        "unpriced_turns": 1,
    }
    assert usage["cost"] == "0.0089"


def test_the_session_list_shows_each_sessions_own_sums(api, owner, session, run):
    empty = SessionFactory(owner=owner)

    listed = {row["id"]: row["usage"] for row in api.get(SESSIONS).json()["results"]}

    assert listed[str(session.pk)]["cost"] == "0.0071"
    assert listed[str(session.pk)]["total_tokens"] == 3715
    assert listed[str(empty.pk)] == {
        "input_tokens": 0,
        "output_tokens": 0,
        "cached_input_tokens": 0,
        "cache_write_tokens": 0,
        "reasoning_tokens": 0,
        "total_tokens": 0,
        "cost": "0",
        "unpriced_turns": 0,
    }


@pytest.mark.parametrize("rows", [0, 1, 4])
def test_the_session_list_takes_the_same_queries_with_costs(
    api, owner, price, rows, django_assert_num_queries
):
    for index in range(rows):
        session = SessionFactory(owner=owner)
        run = RunFactory(session=session, status="running")
        recorded_turn(run, 0, Usage(10 * (index + 1), 2))
    api.get(SESSIONS)  # the token's first use of the minute is noted with a write

    # The token and its user, the page of sessions with their owners, then their
    # runs' sums (one query, for a page not empty).
    with django_assert_num_queries(2 + (rows > 0)):
        response = api.get(SESSIONS)

    assert len(response.json()["results"]) == rows
    assert all(row["usage"]["cost"] != "0" for row in response.json()["results"])


def test_a_sessions_export_carries_its_usage(api, session, run):
    document = api.get(f"{SESSIONS}{session.pk}/export/")
    body = b"".join(document.streaming_content)

    assert b'"cost": "0.0071"' in body or b'"cost":"0.0071"' in body


# The schema


@pytest.fixture(scope="module")
def schema():
    return SchemaGenerator().get_schema(request=None, public=True)["components"]["schemas"]


def test_the_schema_describes_the_usage_of_runs_turns_and_sessions(schema):
    kinds = {
        "input_tokens",
        "output_tokens",
        "cached_input_tokens",
        "cache_write_tokens",
        "reasoning_tokens",
        "total_tokens",
        "cost",
    }
    assert set(schema["Usage"]["properties"]) == kinds
    assert set(schema["RunUsage"]["properties"]) == kinds | {"unpriced_turns"}
    assert schema["RunUsage"]["properties"]["cost"]["nullable"] is True
    assert schema["RunUsage"]["properties"]["cost"]["type"] == "string"
    assert schema["Run"]["properties"]["usage"]["allOf"][0]["$ref"].endswith("/RunUsage")
    assert schema["Session"]["properties"]["usage"]["allOf"][0]["$ref"].endswith("/RunUsage")
    assert schema["Turn"]["properties"]["usage"]["allOf"][0]["$ref"].endswith("/Usage")
    turn = schema["Turn"]["properties"]
    assert {"finish_reason", "truncated", "response_model", "reasoning", "retries"} <= set(turn)
    assert turn["truncated"]["type"] == "boolean"
