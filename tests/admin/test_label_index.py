"""A label filter finds runs by their labels alike in the console, the API and the
dashboard, and on PostgreSQL it is a JSON containment that the runs' GIN index
serves (compared key by key, the planner read every run)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.urls import reverse

from goaai.api.filters import json_key_equals
from runs_app.models import Run
from tests.factories import RunFactory

pytestmark = pytest.mark.django_db

RUNS = reverse("admin:runs_app_run_changelist")


@pytest.fixture
def labelled():
    return {
        "paid": RunFactory(labels={"tier": "paid", "team": "a-b"}),
        "free": RunFactory(labels={"tier": "free"}),
        "number": RunFactory(labels={"tier": 3}),
        "none": RunFactory(labels={}),
    }


def test_a_label_matches_its_value_only(labelled):
    def matching(key, values):
        return set(json_key_equals(Run.objects.all(), "labels", key, values))

    assert matching("tier", ["paid"]) == {labelled["paid"]}
    assert matching("team", ["a-b"]) == {labelled["paid"]}
    assert matching("tier", ["3"]) == set()
    assert matching("tier", ["3", 3]) == {labelled["number"]}
    assert matching("tier", ["paid", "free"]) == {labelled["paid"], labelled["free"]}
    assert matching("colour", ["paid"]) == set()


def test_the_console_and_the_api_filter_labels_alike(client, staff, owner, labelled):
    client.force_login(staff)
    response = client.get(f"{RUNS}?label=tier:paid")
    assert [row.pk for row in response.context["cl"].result_list] == [labelled["paid"].pk]

    labelled["paid"].session.owner = owner
    labelled["paid"].session.save()
    client.force_login(owner)
    answer = client.get("/api/v1/runs/?label=tier:paid").json()
    assert [run["id"] for run in answer["results"]] == [str(labelled["paid"].pk)]


@pytest.mark.postgres
def test_on_postgresql_the_label_filter_is_served_by_the_gin_index(labelled):
    query = json_key_equals(Run.objects.all(), "labels", "tier", ["paid"]).values("pk")
    sql, params = query.query.sql_with_params()
    with connection.cursor() as cursor:
        # With a handful of rows the planner reads the table; asked not to, it shows
        # which index can answer the condition.
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "run_labels_gin" in plan
