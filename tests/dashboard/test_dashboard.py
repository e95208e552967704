"""The operators' dashboard: its figures equal a direct count over a seeded
database, each links to the list it sums, its form says what is wrong, and it
honours the permissions to read every user's runs, tool calls and scores."""

from __future__ import annotations

import datetime as dt
import math
from collections import Counter
from urllib.parse import parse_qsl, urlsplit

import pytest
from django.contrib.auth.models import Group, Permission
from django.db import connection
from django.db.models import Count, Sum
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from goaai.runtime.vocabulary import RunStatus, ToolCallStatus
from runs_app import rollups
from runs_app.dashboard.figures import figures
from runs_app.dashboard.scope import Scope, floor_hour
from runs_app.models import Run, ToolCall
from runs_app.seeding import Plan, Seeder
from tests.factories import UserFactory

NOW = floor_hour(timezone.now()) + dt.timedelta(minutes=30)
URL = "/admin/runs_app/run/dashboard/"


def _seed(sessions: int, seed: int, calls: int = 1) -> None:
    """Four days of conversations by three users, some still waiting or running."""
    Seeder(
        Plan(
            sessions=sessions,
            runs_per_session=3,
            turns_per_run=2,
            calls_per_turn=calls,
            users=3,
            days=4,
            active_fraction=0.3,
            events=False,
            memory=False,
        ),
        seed=seed,
        now=NOW,
    ).run()


@pytest.fixture
def seeded(db):
    _seed(40, seed=7, calls=2)
    assert Run.objects.filter(status=RunStatus.AWAITING_INPUT).exists()
    return Run.objects.all()


def _scope(**filters) -> Scope:
    until = floor_hour(NOW) + dt.timedelta(hours=1)
    # Not on a day's edge: whole days come from daily rollups, the edges from hours.
    return Scope(since=until - dt.timedelta(days=3, hours=7), until=until, **filters)


def _in(scope: Scope):
    return Run.objects.filter(scope.runs_q())


def test_every_figure_equals_a_direct_count_over_the_runs(seeded):
    scope = _scope()
    found = figures(scope, now=NOW)
    runs = _in(scope)
    ended = runs.filter(status__in=rollups.ENDED)

    assert found.totals.runs == ended.count() > 0
    by_status = Counter(dict(ended.values_list("status").annotate(n=Count("*"))))
    assert found.totals.by_status == by_status
    failed = by_status[RunStatus.FAILED] + by_status[RunStatus.TIMED_OUT]
    assert found.totals.error_rate == failed / ended.count()
    sums = ended.aggregate(tokens=Sum("total_tokens"), cost=Sum("cost"))
    assert found.totals.total_tokens == sums["tokens"]
    assert found.totals.cost == sums["cost"]
    assert found.open_runs == runs.exclude(status__in=rollups.ENDED).count()
    # The bars add up to every run in the range, ended or not.
    assert sum(bar.total for bar in found.bars) == runs.count()
    # A bar per UTC day the range touches.
    last = scope.until - dt.timedelta(microseconds=1)
    assert len(found.bars) == (last.date() - scope.since.date()).days + 1

    tokens_by = {
        "agent": dict(ended.values_list("agent").annotate(n=Sum("total_tokens"))),
        "model": dict(ended.values_list("model").annotate(n=Sum("total_tokens"))),
        "user": dict(ended.values_list("session__owner__username").annotate(n=Sum("total_tokens"))),
    }
    assert {g.name: g.sums.total_tokens for g in found.by_agent} == tokens_by["agent"]
    assert {g.name: g.sums.total_tokens for g in found.by_model} == tokens_by["model"]
    assert {g.name: g.sums.total_tokens for g in found.by_user} == tokens_by["user"]
    assert sum(g.sums.runs for g in found.by_day) == ended.count()

    calls = ToolCall.objects.filter(run__in=ended, status=ToolCallStatus.FAILED)
    failing = dict(calls.values_list("name").annotate(n=Count("*")))
    assert {t.tool: t.failed for t in found.tools} == failing
    assert failing, "the seeded tools fail now and then"

    waiting = Run.objects.filter(status=RunStatus.AWAITING_INPUT)
    assert found.pending.total == waiting.count()
    assert [w.run_id for w in found.pending.oldest] == list(
        waiting.order_by("awaiting_since").values_list("pk", flat=True)[:10]
    )


def test_each_percentile_lies_in_the_bucket_it_reports(seeded):
    scope = _scope()
    found = figures(scope, now=NOW)
    durations = sorted(
        (run.ended_at - run.started_at).total_seconds() * 1000
        for run in _in(scope).filter(status__in=rollups.ENDED, started_at__isnull=False)
    )
    (duration, working) = found.latency
    assert duration.runs == len(durations)
    for percentile in duration.percentiles:
        exact = durations[math.ceil(len(durations) * percentile.rank / 100) - 1]
        assert percentile.low <= exact < percentile.high, percentile.rank
        assert percentile.high <= percentile.low * 1.1 + 1e-6 or percentile.low == 0
    assert working.runs == len(durations)


def _listed(client, url: str) -> set:
    response = client.get(url)
    assert response.status_code == 200, url
    return {row.pk for row in response.context["cl"].result_list}


def test_each_figure_links_to_the_list_it_sums(seeded, client, staff):
    client.force_login(staff)
    scope = _scope()
    found = figures(scope, now=NOW)
    runs = _in(scope)

    for bar in found.bars:
        for segment in bar.segments:
            listed = _listed(client, segment.url)
            expected = runs.filter(
                status=segment.status, created_at__gte=bar.start, created_at__lt=bar.end
            )
            assert listed == set(expected.values_list("pk", flat=True))
            assert len(listed) == segment.runs
    for group in found.by_agent + found.by_user + found.by_model:
        listed = _listed(client, group.url)
        assert (
            len(listed & set(runs.filter(status__in=rollups.ENDED).values_list("pk", flat=True)))
            == group.sums.runs
        )
    for tool in found.tools:
        assert len(_listed(client, tool.url)) == tool.failed
        for _kind, n, url in tool.error_kinds:
            assert len(_listed(client, url)) == n
    for _kind, n, url in found.pending.by_kind:
        assert len(_listed(client, url)) == n
    slowest = found.latency[0].percentiles[-1]
    took = {
        run.pk
        for run in runs.filter(started_at__isnull=False, ended_at__isnull=False)
        if (run.ended_at - run.started_at).total_seconds() * 1000 >= int(slowest.low)
    }
    assert _listed(client, slowest.url) == took
    # The links carry the scope's range as the list reads it.
    params = dict(parse_qsl(urlsplit(found.status_urls["failed"]).query))
    assert params["created_at_from"] == scope.since.isoformat()


def test_filters_narrow_every_figure(seeded):
    user = Run.objects.values_list("session__owner__username", "session__owner_id").first()
    scope = _scope(owner=user[1], username=user[0])
    found = figures(scope, now=NOW)
    ended = _in(scope).filter(status__in=rollups.ENDED)
    assert found.totals.runs == ended.count() > 0
    assert [g.name for g in found.by_user] == [user[0]]
    # The percentiles are read from this user's histograms alone.
    timed = ended.filter(started_at__isnull=False, ended_at__isnull=False).count()
    assert [figure.runs for figure in found.latency] == [timed, timed]
    assert figures(_scope(), now=NOW).latency[0].runs > timed

    agent = ended.values_list("agent", flat=True).first()
    by_agent = figures(_scope(agent=agent), now=NOW)
    assert by_agent.totals.runs == _in(_scope(agent=agent)).filter(status__in=rollups.ENDED).count()


def test_a_label_filter_counts_from_the_runs_and_agrees_with_them(seeded):
    scope = _scope(label=("tier", "free"))
    found = figures(scope, now=NOW)
    ended = _in(scope).filter(status__in=rollups.ENDED)
    assert found.counted_from_runs
    assert found.totals.runs == ended.count() > 0
    assert found.totals.total_tokens == ended.aggregate(n=Sum("total_tokens"))["n"]


def test_the_last_day_is_drawn_hour_by_hour(seeded):
    until = floor_hour(NOW) + dt.timedelta(hours=1)
    scope = Scope(since=until - dt.timedelta(hours=24), until=until)
    found = figures(scope, now=NOW)
    assert len(found.bars) == 24
    assert found.totals.runs == _in(scope).filter(status__in=rollups.ENDED).count()


def test_the_page_shows_the_figures_and_links(seeded, client, staff):
    client.force_login(staff)
    response = client.get(URL, {"range": "7d"})
    assert response.status_code == 200
    page = response.content.decode()
    assert "<svg" in page
    assert "Tools that fail most" in page
    assert "/admin/runs_app/run/?" in page
    index = client.get("/admin/").content.decode()
    assert URL in index


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"owner": "nobody-here"}, "No user is named"),
        ({"label": "tier"}, "key:value"),
        ({"range": "custom", "since": "2026-12-02", "until": "2026-11-01"}, "comes before"),
        ({"range": "custom", "since": "0001-01-01"}, "Pick a day"),
        ({"range": "custom", "until": "9999-12-31"}, "Pick a day"),
        ({"range": "custom", "since": "2026-13-40"}, "valid date"),
        ({"range": "forever"}, "valid choice"),
        ({"agent": "no-such-agent"}, "valid choice"),
    ],
)
def test_the_form_says_what_is_wrong(db, client, staff, query, message):
    client.force_login(staff)
    response = client.get(URL, query)
    assert response.status_code == 400
    assert message in response.content.decode()


def test_it_takes_the_permission_to_read_every_run(db, client):
    plain = UserFactory(username="dora", is_staff=True)
    client.force_login(plain)
    assert client.get(URL).status_code == 403

    auditor = UserFactory(username="erin", is_staff=True)
    auditor.groups.add(Group.objects.get(name="Auditors"))
    client.force_login(auditor)
    assert client.get(URL).status_code == 200

    runs_only = UserFactory(username="fred", is_staff=True)
    runs_only.user_permissions.add(Permission.objects.get(codename="view_run"))
    client.force_login(runs_only)
    page = client.get(URL).content.decode()
    assert "Reading tool calls takes the permission" in page
    assert 'id="scores"' not in page

    client.logout()
    assert client.get(URL).status_code == 302


def test_the_page_costs_the_same_queries_whatever_the_number_of_runs(db, client, staff):
    client.force_login(staff)

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(URL, {"range": "7d"}).status_code == 200
        return len(captured.captured_queries)

    _seed(5, seed=1)
    few = queries()
    _seed(40, seed=2)
    assert Run.objects.count() > 100
    assert queries() == few
