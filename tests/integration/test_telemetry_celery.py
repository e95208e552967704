"""Telemetry from a Celery prefork worker: the pool process that executes a run sets
up its own exporters after the fork, from the standard OTEL_* variables, and its
spans and metrics reach the OTLP receiver (real processes: a worker on Redis,
PostgreSQL shared with this test)."""

from __future__ import annotations

import os

import pytest
from celery import Celery

from goaai.runtime.vocabulary import RunStatus
from runs_app.models import Run, ToolCall
from tests.factories import SessionFactory
from tests.integration.celery_support import ROOT, database_url, start_worker, stop_worker, wait_for
from tests.runs_app.test_telemetry import Receiver, attributes, span_id

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.django_db(transaction=True)]


def test_a_prefork_worker_exports_the_runs_it_executes(tmp_path, redis_url, owner):
    receiver = Receiver()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "goaai.settings",
        "DATABASE_URL": database_url(),
        "DATABASE_POOL": "0",
        "REDIS_URL": redis_url,
        "GOAAI_REAPER_INTERVAL": "0",
        "PYTHONPATH": str(ROOT),
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_SERVICE_NAME": "goaai-worker",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_METRIC_EXPORT_INTERVAL": "200",
    }
    log = tmp_path / "worker.log"
    session = SessionFactory(owner=owner, agent="concierge")
    run = Run.objects.create(session=session, agent="concierge", input="ask the assistant echo hi")
    client = Celery("goaai-test-client", broker=redis_url)
    worker = start_worker(env, log, "--pool=prefork", "--concurrency=1")
    try:
        client.send_task("goaai.execute_run", args=[str(run.id)])
        wait_for(
            lambda: Run.objects.get(pk=run.pk).status == RunStatus.COMPLETED,
            60,
            "the worker to complete the run",
            log,
        )
        child = Run.objects.get(parent_run=run)
        wanted = {span_id(run.pk), span_id(child.pk)}
        wait_for(
            lambda: wanted <= {span.span_id for span, _ in receiver.spans()},
            30,
            "the worker's spans",
            log,
        )
        wait_for(lambda: bool(receiver.metrics), 30, "the worker's metrics", log)
    finally:
        stop_worker(worker)
        receiver.close()

    spans = {span.span_id: (span, resource) for span, resource in receiver.spans()}
    root, resource = spans[span_id(run.pk)]
    assert resource["service.name"] == "goaai-worker"
    assert root.trace_id == run.pk.bytes
    delegation = ToolCall.objects.get(run=run)
    child_span, _ = spans[span_id(child.pk)]
    assert child_span.trace_id == run.pk.bytes
    assert child_span.parent_span_id == span_id(delegation.pk)
    assert attributes(child_span.attributes)["gen_ai.agent.name"] == "assistant"
    names = {
        metric.name
        for request in receiver.metrics
        for resource_metrics in request.resource_metrics
        for scope in resource_metrics.scope_metrics
        for metric in scope.metrics
    }
    assert {"gen_ai.client.token.usage", "gen_ai.client.operation.duration"} <= names
