"""Usage: GET /api/v1/usage/ adds up tokens of each kind and cost by agent, model,
user or day, over the runs the caller may read."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.utils import timezone

from goaai.runtime.payloads import cost_text
from goaai.runtime.types import USAGE_KINDS, Usage
from runs_app import services
from runs_app.models import Run, Turn
from tests.api.test_staff_permissions import client_for
from tests.factories import ModelPriceFactory, RunFactory, SessionFactory, recorded_turn
from tests.permissions import staff_user

pytestmark = pytest.mark.django_db

USAGE = "/api/v1/usage/"
KINDS = (*USAGE_KINDS, "total_tokens")


@pytest.fixture
def prices():
    """gpt-4.1 with a price for every kind; claude with input and output only (its
    cache reads, writes and reasoning cost what input and output do)."""
    ModelPriceFactory(
        profile="openai",
        model="gpt-4.1",
        input_per_million=Decimal("2.5"),
        output_per_million=Decimal("10"),
        cached_input_per_million=Decimal("1.25"),
        cache_write_per_million=Decimal("3.125"),
        reasoning_per_million=Decimal("12"),
    )
    ModelPriceFactory(
        profile="anthropic",
        model="claude",
        input_per_million=Decimal("3"),
        output_per_million=Decimal("15"),
    )


def make_run(session, *, agent="assistant", turns=(), created_at=None) -> Run:
    """A run whose turns are recorded as the loop records them: each ``(model,
    usage)`` of ``turns`` is one turn, priced and added to the run by the services."""
    run = RunFactory(session=session, agent=agent, status="running")
    for index, (model, usage) in enumerate(turns):
        recorded_turn(run, index, usage, model=model)
    if created_at is not None:
        Run.objects.filter(pk=run.pk).update(created_at=created_at)
    run.refresh_from_db()
    return run


def stored_sums(runs) -> dict[str, object]:
    """What the runs' rows say, added up in Python: what the endpoint must answer."""
    runs = list(runs)
    sums: dict[str, object] = {kind: sum(getattr(r, kind) for r in runs) for kind in KINDS}
    sums["runs"] = len(runs)
    sums["turns"] = Turn.objects.filter(run__in=runs).count()
    sums["unpriced_turns"] = sum(r.unpriced_turns for r in runs)
    sums["cost"] = cost_text(sum((r.cost for r in runs), Decimal(0)))
    return sums


def by_group(response) -> dict[str, dict]:
    assert response.status_code == 200, response.json()
    return {row["group"]: row for row in response.json()["results"]}


def errors(response) -> list[tuple[str, str | None]]:
    body = response.json()
    assert body["type"] == "validation_error"
    return [(error["code"], error["attr"]) for error in body["errors"]]


@pytest.fixture
def session(owner):
    return SessionFactory(owner=owner)


# Sums


def test_by_agent_the_sums_are_the_runs_stored_totals(api, session, prices):
    assistant = [
        make_run(
            session,
            turns=[
                ("openai:gpt-4.1", Usage(1234, 567, 890, 12, 100)),
                ("anthropic:claude", Usage(77, 31, 5000, 250, 9)),
            ],
        ),
        make_run(session, turns=[("openai:gpt-4.1", Usage(3, 1))]),
    ]
    concierge = [make_run(session, agent="concierge", turns=[("anthropic:claude", Usage(40, 7))])]

    groups = by_group(api.get(USAGE, {"group_by": "agent"}))

    assert set(groups) == {"assistant", "concierge"}
    for name, runs in (("assistant", assistant), ("concierge", concierge)):
        expected = stored_sums(Run.objects.filter(pk__in=[r.pk for r in runs]))
        assert {key: groups[name][key] for key in expected} == expected
    # The prices were applied per kind: nothing is rounded away in the sum.
    assert Decimal(groups["assistant"]["cost"]) == sum(
        (r.cost for r in Run.objects.filter(agent="assistant")), Decimal(0)
    )
    assert Decimal(groups["assistant"]["cost"]) > 0
    assert groups["assistant"]["total_tokens"] == 1234 + 567 + 890 + 12 + 77 + 31 + 5000 + 250 + 4


def test_by_model_the_turns_of_each_model_are_added_up(api, session, prices):
    mixed = make_run(
        session,
        turns=[
            ("openai:gpt-4.1", Usage(100, 20, 300, 0, 5)),
            ("anthropic:claude", Usage(10, 2)),
            ("openai:gpt-4.1", Usage(50, 10)),
        ],
    )
    make_run(session, turns=[("anthropic:claude", Usage(7, 3, 0, 11))])

    groups = by_group(api.get(USAGE, {"group_by": "model"}))

    assert set(groups) == {"openai:gpt-4.1", "anthropic:claude"}
    for model, group in groups.items():
        turns = list(Turn.objects.filter(model=model))
        for kind in USAGE_KINDS:
            assert group[kind] == sum(getattr(t, kind) for t in turns)
        assert group["total_tokens"] == sum(
            t.input_tokens + t.cached_input_tokens + t.cache_write_tokens + t.output_tokens
            for t in turns
        )
        assert group["cost"] == cost_text(sum((t.cost for t in turns), Decimal(0)))
        assert group["turns"] == len(turns)
        assert group["unpriced_turns"] == 0
    assert groups["openai:gpt-4.1"]["runs"] == 1
    assert groups["anthropic:claude"]["runs"] == 2
    # Every model's turns together cost what the runs do.
    assert sum(Decimal(g["cost"]) for g in groups.values()) == sum(
        (r.cost for r in Run.objects.all()), Decimal(0)
    )
    assert (
        mixed.cost
        == Decimal(groups["openai:gpt-4.1"]["cost"]) + Turn.objects.get(run=mixed, index=1).cost
    )


def test_a_model_without_a_price_has_an_unknown_cost_not_a_free_one(api, session, prices):
    make_run(session, turns=[("scripted", Usage(10, 5)), ("local:qwen3", Usage(20, 4))])
    make_run(session, turns=[("openai:gpt-4.1", Usage(1000, 100))])

    models = by_group(api.get(USAGE, {"group_by": "model"}))
    agents = by_group(api.get(USAGE, {"group_by": "agent"}))

    assert models["scripted"]["cost"] is None
    assert models["scripted"]["unpriced_turns"] == 1
    assert models["local:qwen3"]["cost"] is None
    assert models["openai:gpt-4.1"]["cost"] == "0.0035"
    assert models["openai:gpt-4.1"]["unpriced_turns"] == 0
    # The agent's runs had priced and unpriced turns: the priced ones are summed.
    assert agents["assistant"]["cost"] == "0.0035"
    assert agents["assistant"]["unpriced_turns"] == 2
    # Known costs first, costliest first; unknown ones last.
    assert next(iter(models)) == "openai:gpt-4.1"


def test_a_turn_still_waiting_for_its_reply_is_not_counted_as_unpriced(api, session, prices):
    run = make_run(session, turns=[("openai:gpt-4.1", Usage(10, 1))])
    services.turn_start(run_id=run.id, index=1, model="openai:gpt-4.1", request_messages=[])

    group = by_group(api.get(USAGE, {"group_by": "model"}))["openai:gpt-4.1"]

    assert group["turns"] == 2
    assert group["unpriced_turns"] == 0
    assert group["cost"] == cost_text(Run.objects.get(pk=run.pk).cost)


def test_runs_without_turns_count_as_runs_with_no_usage(api, session):
    RunFactory(session=session, agent="assistant")

    group = by_group(api.get(USAGE, {"group_by": "agent"}))["assistant"]

    assert group["runs"] == 1
    assert group["turns"] == 0
    assert group["total_tokens"] == 0
    assert group["cost"] == "0"


def test_by_agent_the_costliest_comes_first(api, owner, prices):
    session = SessionFactory(owner=owner)
    make_run(session, agent="assistant", turns=[("openai:gpt-4.1", Usage(10, 1))])
    make_run(session, agent="concierge", turns=[("openai:gpt-4.1", Usage(10_000, 1000))])
    make_run(session, agent="zeta", turns=[("scripted", Usage(99_999, 1))])

    response = api.get(USAGE, {"group_by": "agent"})

    assert [row["group"] for row in response.json()["results"]] == [
        "concierge",
        "assistant",
        "zeta",
    ]


# Days and the time range


def test_by_day_runs_are_grouped_by_their_creation_date_in_utc_in_date_order(api, session, prices):
    late = dt.datetime(2026, 3, 1, 23, 59, 59, tzinfo=dt.UTC)
    early_next = dt.datetime(2026, 3, 2, 0, 0, 0, tzinfo=dt.UTC)
    first = make_run(session, turns=[("openai:gpt-4.1", Usage(10, 2))], created_at=late)
    second = make_run(session, turns=[("openai:gpt-4.1", Usage(20, 4))], created_at=early_next)
    third = make_run(
        session,
        turns=[("anthropic:claude", Usage(5, 5))],
        created_at=early_next + dt.timedelta(hours=5),
    )

    response = api.get(USAGE, {"group_by": "day"})

    assert [row["group"] for row in response.json()["results"]] == ["2026-03-01", "2026-03-02"]
    groups = by_group(response)
    assert groups["2026-03-01"]["runs"] == 1
    assert groups["2026-03-01"]["cost"] == cost_text(first.cost)
    assert groups["2026-03-02"]["runs"] == 2
    assert groups["2026-03-02"]["cost"] == cost_text(second.cost + third.cost)
    assert groups["2026-03-02"]["input_tokens"] == 25


def test_day_is_the_default_grouping(api, session):
    RunFactory(session=session)

    response = api.get(USAGE)

    assert response.status_code == 200
    assert response.json()["group_by"] == "day"
    assert [row["group"] for row in response.json()["results"]] == [
        timezone.now().astimezone(dt.UTC).date().isoformat()
    ]


def test_from_is_included_and_to_is_not(api, session):
    days = [dt.datetime(2026, 5, d, 12, tzinfo=dt.UTC) for d in (1, 2, 3)]
    for day in days:
        make_run(session, created_at=day)
    edge = dt.datetime(2026, 5, 2, 0, 0, tzinfo=dt.UTC)
    make_run(session, created_at=edge)

    response = api.get(USAGE, {"group_by": "day", "from": "2026-05-02", "to": "2026-05-03"})

    assert response.json()["from"] == "2026-05-02T00:00:00Z"
    assert response.json()["to"] == "2026-05-03T00:00:00Z"
    assert [(row["group"], row["runs"]) for row in response.json()["results"]] == [
        ("2026-05-02", 2)
    ]


def test_from_and_to_take_a_date_and_time_with_an_offset(api, session):
    make_run(session, created_at=dt.datetime(2026, 5, 2, 9, 0, tzinfo=dt.UTC))
    make_run(session, created_at=dt.datetime(2026, 5, 2, 11, 0, tzinfo=dt.UTC))

    response = api.get(USAGE, {"from": "2026-05-02T12:00:00+02:00", "to": "2026-05-02T12:00:00"})

    # 12:00 at +02:00 is 10:00 UTC; a moment without an offset is UTC.
    assert response.json()["from"] == "2026-05-02T10:00:00Z"
    assert [row["runs"] for row in response.json()["results"]] == [1]


@pytest.mark.parametrize(
    ("params", "attr"),
    [
        ({"group_by": "week"}, "group_by"),
        ({"group_by": "Agent"}, "group_by"),
        ({"from": "yesterday"}, "from"),
        ({"from": "2026-02-30"}, "from"),
        ({"to": "2026-13-01T00:00:00Z"}, "to"),
        ({"to": "2026-05-01T25:00:00Z"}, "to"),
        ({"from": "2026-05-01\x00"}, "from"),
        ({"from": "0001-01-01T00:00:00+05:00"}, "from"),
        ({"to": "9999-12-31T23:00:00-05:00"}, "to"),
        ({"from": "2026-05-02", "to": "2026-05-01"}, "to"),
        ({"from": "2026-05-02", "to": "2026-05-02"}, "to"),
    ],
)
def test_bad_parameters_are_a_400_in_the_api_error_shape(api, session, params, attr):
    RunFactory(session=session)

    response = api.get(USAGE, params)

    assert response.status_code == 400
    assert errors(response) == [("invalid", attr)]


def test_an_empty_grouping_is_the_default_one(api, session):
    RunFactory(session=session)

    response = api.get(USAGE, {"group_by": "", "from": "", "to": ""})

    assert response.status_code == 200
    assert response.json()["group_by"] == "day"
    assert response.json()["from"] is None


# Whose runs


@pytest.fixture
def bobs_run(other_user, prices):
    return make_run(SessionFactory(owner=other_user), turns=[("openai:gpt-4.1", Usage(500, 50))])


def test_a_caller_sees_only_their_own_runs(api, session, bobs_run, prices, owner):
    mine = make_run(session, turns=[("openai:gpt-4.1", Usage(10, 1))])

    groups = by_group(api.get(USAGE, {"group_by": "user"}))

    assert list(groups) == ["alice"]
    assert groups["alice"]["user"] == owner.pk
    assert groups["alice"]["cost"] == cost_text(mine.cost)
    assert by_group(api.get(USAGE, {"group_by": "model"}))["openai:gpt-4.1"]["runs"] == 1


def test_staff_with_the_view_permission_see_every_users_runs(
    staff_api, session, bobs_run, prices, owner, other_user
):
    mine = make_run(session, turns=[("openai:gpt-4.1", Usage(10, 1))])

    groups = by_group(staff_api.get(USAGE, {"group_by": "user"}))

    assert set(groups) == {"alice", "bob"}
    assert groups["bob"]["user"] == other_user.pk
    assert groups["bob"]["cost"] == cost_text(bobs_run.cost)
    assert groups["alice"]["cost"] == cost_text(mine.cost)
    # Bob's run cost more: he comes first.
    assert [
        row["group"] for row in staff_api.get(USAGE, {"group_by": "user"}).json()["results"]
    ] == [
        "bob",
        "alice",
    ]


def test_staff_without_the_view_permission_see_only_their_own(bobs_run, prices):
    dave = staff_user("dave")
    make_run(SessionFactory(owner=dave), turns=[("openai:gpt-4.1", Usage(1, 1))])
    erin = staff_user("erin", perms=("runs_app.view_run",))

    assert set(by_group(client_for(dave).get(USAGE, {"group_by": "user"}))) == {"dave"}
    assert set(by_group(client_for(erin).get(USAGE, {"group_by": "user"}))) == {"bob", "dave"}


def test_signed_out_callers_are_refused(client):
    response = client.get(USAGE)

    assert response.status_code in (401, 403)


# Queries


@pytest.mark.parametrize("group_by", ["agent", "model", "user", "day"])
def test_the_query_count_does_not_grow_with_the_runs(
    api, session, prices, group_by, django_assert_num_queries
):
    api.get(USAGE)  # the token's first use of the minute is noted with a write
    # The token and its user, the sums, the turns counted (by model, one query does
    # both), the feedback counted.
    expected = 3 if group_by == "model" else 4
    for rows in (0, 1, 4):
        while Run.objects.count() < rows:
            make_run(
                session,
                agent=f"agent{Run.objects.count()}",
                turns=[("openai:gpt-4.1", Usage(5, 1)), ("anthropic:claude", Usage(5, 1))],
            )

        with django_assert_num_queries(expected):
            response = api.get(USAGE, {"group_by": group_by})

        assert response.status_code == 200
        assert sum(row["runs"] for row in response.json()["results"]) >= rows
