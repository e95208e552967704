"""/metrics: Prometheus' text format, for loopback clients or a bearer secret."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import redis
from channels.layers import get_channel_layer
from django.test import override_settings
from django.utils import timezone
from prometheus_client import REGISTRY

from goaai.runtime import rt
from goaai.runtime.vocabulary import RunStatus
from runs_app.models import Turn
from sessions_app.publisher import Written, publish_events, publisher, session_group
from tests.deploy.conftest import ROOT
from tests.factories import RunFactory

IN_MEMORY = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def scrape(client, **extra) -> str:
    response = client.get("/metrics", **extra)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    return response.content.decode()


@pytest.mark.django_db
def test_runs_by_status_are_counted_at_scrape_time(client) -> None:
    RunFactory.create_batch(2, status=RunStatus.COMPLETED)
    RunFactory(status=RunStatus.RUNNING)
    text = scrape(client)
    assert 'goaai_runs{status="completed"} 2.0' in text
    assert 'goaai_runs{status="running"} 1.0' in text
    assert 'goaai_runs{status="failed"} 0.0' in text


@pytest.mark.django_db(transaction=True)
def test_model_latency_is_recorded_for_every_turn(client, owner, inline_runtime) -> None:
    before = sample("goaai_model_latency_seconds_count", model="scripted")
    session = rt.create_session(owner=owner, agent="assistant")
    result = rt.run("assistant", "calculate 2 * 3", session=session.id)
    assert result.status == "completed"
    turns = Turn.objects.filter(run_id=result.id).count()
    assert turns == 2  # the calculator call, then the answer
    after = sample("goaai_model_latency_seconds_count", model="scripted")
    assert after - before == turns
    assert 'goaai_model_latency_seconds_bucket{le="0.01",model="scripted"}' in scrape(client)


@override_settings(CHANNEL_LAYERS=IN_MEMORY)
async def test_event_publication_lag_is_recorded() -> None:
    layer = get_channel_layer()
    publisher.attach_loop(asyncio.get_running_loop())
    session_id = uuid.uuid4()
    channel = await layer.new_channel()
    await layer.group_add(session_group(session_id), channel)
    before = sample("goaai_event_publish_lag_seconds_count", layer="InMemoryChannelLayer")
    event = Written(session_id, None, 1, "session.updated", {}, timezone.now())
    # As a committing worker thread hands events over.
    await asyncio.to_thread(publish_events, [event])
    delivered = await asyncio.wait_for(layer.receive(channel), 5)
    assert delivered["events"][0]["seq"] == 1
    for _ in range(10):
        await asyncio.sleep(0)
    after = sample("goaai_event_publish_lag_seconds_count", layer="InMemoryChannelLayer")
    assert after == before + 1


@pytest.mark.django_db
@pytest.mark.redis
def test_the_celery_queue_length_is_read_from_redis(client, redis_url) -> None:
    broker = redis.Redis.from_url(redis_url)
    broker.rpush("celery", "a", "b", "c")
    broker.rpush("celery\x06\x163", "d")  # a priority step's list
    broker.hset("unacked", "tag", "e")
    with override_settings(CELERY_BROKER_URL=redis_url):
        text = scrape(client)
    assert 'goaai_celery_queue_length{queue="celery"} 4.0' in text
    assert "goaai_celery_unacked 1.0" in text


@pytest.mark.django_db
def test_every_family_is_described(client) -> None:
    text = scrape(client)
    for family in (
        "goaai_runs",
        "goaai_model_latency_seconds",
        "goaai_event_publish_lag_seconds",
    ):
        assert f"# TYPE {family} " in text


@pytest.mark.django_db
def test_other_addresses_are_refused(client) -> None:
    response = client.get("/metrics", REMOTE_ADDR="203.0.113.7")
    assert response.status_code == 403
    assert "goaai_runs" not in response.content.decode()


@pytest.mark.django_db
@override_settings(GOAAI_METRICS_TOKEN="s3cret-metrics-token")
def test_with_a_token_only_the_token_opens_them(client) -> None:
    assert client.get("/metrics").status_code == 401
    wrong = client.get("/metrics", HTTP_AUTHORIZATION="Bearer not-it")
    assert wrong.status_code == 401
    assert wrong["WWW-Authenticate"].startswith("Bearer")
    text = scrape(
        client, REMOTE_ADDR="203.0.113.7", HTTP_AUTHORIZATION="Bearer s3cret-metrics-token"
    )
    assert "goaai_runs" in text


# What a committing process records (sessions_app.metrics needs no Django set-up).
OBSERVE = """
from sessions_app.metrics import observe_publish_lag
observe_publish_lag(layer="multiprocess-check", seconds=1.5)
"""
SCRAPE = """
import django; django.setup()
from prometheus_client import generate_latest
from runs_app.metrics import scrape_registry
print(generate_latest(scrape_registry()).decode())
"""


def test_processes_of_a_host_are_reported_together(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "goaai.test_settings",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
    }
    for _ in range(2):  # two processes, each publishing one batch of events
        subprocess.run([sys.executable, "-c", OBSERVE], env=env, cwd=ROOT, check=True)  # noqa: S603
    scraped = subprocess.run(  # noqa: S603
        [sys.executable, "-c", SCRAPE],
        env=env,
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert 'goaai_event_publish_lag_seconds_count{layer="multiprocess-check"} 2.0' in scraped
    assert 'goaai_event_publish_lag_seconds_sum{layer="multiprocess-check"} 3.0' in scraped
