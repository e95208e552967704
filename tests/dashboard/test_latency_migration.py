"""Migration 0018: the latency histograms kept per user become UserLatencyRollup,
and LatencyRollup is added up from them for every user together."""

import datetime as dt

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("runs_app", "0017_run_model_backfill")]
AFTER = [("runs_app", "0018_latency_rollups_of_everyone")]
DAY = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)


def _migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def test_every_users_histograms_are_added_up_from_each_users(django_user_model):
    ada = django_user_model.objects.create_user("ada", password="pw")
    bob = django_user_model.objects.create_user("bob", password="pw")
    try:
        old = _migrate(BEFORE).get_model("runs_app", "LatencyRollup")
        common = {"span": "day", "period": DAY, "agent": "assistant", "model": "m"}
        old.objects.bulk_create(
            [
                old(**common, owner_id=ada.pk, measure="duration", bucket=40, runs=3),
                old(**common, owner_id=bob.pk, measure="duration", bucket=40, runs=2),
                old(**common, owner_id=bob.pk, measure="working", bucket=7, runs=1),
            ]
        )

        apps = _migrate(AFTER)
    finally:
        _migrate(executor_leaf())

    everyone = apps.get_model("runs_app", "LatencyRollup")
    by_user = apps.get_model("runs_app", "UserLatencyRollup")
    assert sorted(everyone.objects.values_list("measure", "bucket", "runs")) == [
        ("duration", 40, 5),
        ("working", 7, 1),
    ]
    assert by_user.objects.filter(owner_id=bob.pk).count() == 2


def executor_leaf():
    """The newest migration of every app (where the tests run)."""
    return MigrationExecutor(connection).loader.graph.leaf_nodes()
