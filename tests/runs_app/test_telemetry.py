"""OpenTelemetry export of runs, end to end: runs executed by the runtime, their spans
and metrics exported over OTLP/HTTP to a receiver on 127.0.0.1 written here, decoded
with OpenTelemetry's own protobuf messages."""

from __future__ import annotations

import gzip
import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.db import connection
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from goaai.runtime import rt
from runs_app import telemetry
from runs_app.models import Run, ToolCall, Turn


class Receiver:
    """An OTLP/HTTP receiver: keeps every export request it was sent, decoded."""

    def __init__(self) -> None:
        self.traces: list[ExportTraceServiceRequest] = []
        self.metrics: list[ExportMetricsServiceRequest] = []
        self.headers: list[dict[str, str]] = []
        received = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                received.headers.append(dict(self.headers))
                if self.path == "/v1/traces":
                    received.traces.append(ExportTraceServiceRequest.FromString(body))
                    answer = ExportTraceServiceResponse().SerializeToString()
                elif self.path == "/v1/metrics":
                    received.metrics.append(ExportMetricsServiceRequest.FromString(body))
                    answer = ExportMetricsServiceResponse().SerializeToString()
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def spans(self) -> list[tuple[Span, dict[str, Any]]]:
        """Every span received, with its resource's attributes."""
        found = []
        for request in self.traces:
            for resource_spans in request.resource_spans:
                resource = attributes(resource_spans.resource.attributes)
                for scope_spans in resource_spans.scope_spans:
                    found += [(span, resource) for span in scope_spans.spans]
        return found

    def histogram_points(self, name: str) -> list[tuple[dict[str, Any], int, float]]:
        """The last export's data points of the histogram ``name``: (attributes,
        count, sum)."""
        found = []
        for request in self.metrics[-1:]:
            for resource_metrics in request.resource_metrics:
                for scope_metrics in resource_metrics.scope_metrics:
                    for metric in scope_metrics.metrics:
                        if metric.name != name:
                            continue
                        found += [
                            (attributes(point.attributes), point.count, point.sum)
                            for point in metric.histogram.data_points
                        ]
        return found

    def metric_units(self) -> dict[str, tuple[str, list[float]]]:
        found = {}
        for request in self.metrics[-1:]:
            for resource_metrics in request.resource_metrics:
                for scope_metrics in resource_metrics.scope_metrics:
                    for metric in scope_metrics.metrics:
                        points = metric.histogram.data_points
                        bounds = list(points[0].explicit_bounds) if points else []
                        found[metric.name] = (metric.unit, bounds)
        return found


def value(any_value: AnyValue) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [value(item) for item in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


def attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: value(pair.value) for pair in pairs}


def span_id(record_id: Any) -> bytes:
    return (uuid.UUID(str(record_id)).int & ((1 << 64) - 1)).to_bytes(8, "big")


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.close()


@pytest.fixture
def exporting(settings: Any, receiver: Receiver) -> Iterator[Receiver]:
    """Telemetry exported to ``receiver``, as OTEL_EXPORTER_OTLP_ENDPOINT sets it."""
    telemetry.shutdown()
    settings.GOAAI_OTEL_TRACES_ENDPOINT = f"{receiver.url}/v1/traces"
    settings.GOAAI_OTEL_METRICS_ENDPOINT = f"{receiver.url}/v1/metrics"
    settings.GOAAI_OTEL_CAPTURE_CONTENT = False
    yield receiver
    telemetry.shutdown()


@pytest.fixture
def concierge_run(owner: Any, inline_runtime: Any, monkeypatch: pytest.MonkeyPatch) -> Run:
    """A concierge's run that asked the assistant (a child run), whose calculator
    call failed before it answered."""
    held: list[uuid.UUID] = []
    if connection.vendor == "sqlite":
        # The suite's SQLite database is in memory, shared between threads through
        # one cache, which answers a reader beside a writer with "table is locked"
        # instead of waiting (a SQLite file, as goaai runs on, waits): the runs'
        # ends are held until the concierge's run is done. On PostgreSQL the child
        # run's telemetry is read while its parent still works.
        monkeypatch.setattr(telemetry, "run_ended", lambda *, run_id: held.append(run_id))
    session = rt.create_session(owner=owner, agent="concierge")
    info = rt.run("concierge", "ask the assistant calculate 1/0", session=session.id)
    monkeypatch.undo()
    for run_id in held:
        telemetry.run_ended(run_id=run_id)
    if connection.vendor == "sqlite":
        assert len(held) == 2
    return Run.objects.get(pk=info.id)


@pytest.mark.django_db(transaction=True)
def test_a_run_and_its_child_run_arrive_as_one_trace(exporting, concierge_run):
    assert telemetry.flush()
    parent = concierge_run
    child = Run.objects.get(parent_run=parent)
    by_id = {span.span_id: (span, resource) for span, resource in exporting.spans()}
    records = [
        *Run.objects.filter(pk__in=[parent.pk, child.pk]),
        *Turn.objects.filter(run__in=[parent, child]),
        *ToolCall.objects.filter(run__in=[parent, child]),
    ]
    # One span per run, turn and tool call, each under its record's id, in one trace
    # named by the top-level run.
    assert sorted(by_id) == sorted(span_id(record.pk) for record in records)
    assert {span.trace_id for span, _ in by_id.values()} == {parent.pk.bytes}

    root, resource = by_id[span_id(parent.pk)]
    assert root.name == "invoke_agent concierge"
    assert root.parent_span_id == b""
    assert root.kind == Span.SPAN_KIND_INTERNAL
    assert resource["service.name"] == "goaai"
    assert resource["service.instance.id"]
    root_attributes = attributes(root.attributes)
    assert root_attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root_attributes["gen_ai.agent.name"] == "concierge"
    assert root_attributes["gen_ai.agent.id"] == "concierge"
    assert root_attributes["gen_ai.conversation.id"] == str(parent.session_id)
    assert root_attributes["gen_ai.provider.name"] == "goaai.scripted"
    assert root_attributes["gen_ai.request.model"] == "scripted"
    assert root_attributes["goaai.run.id"] == str(parent.pk)
    assert root_attributes["goaai.run.status"] == "completed"
    assert root_attributes["gen_ai.usage.input_tokens"] == parent.input_tokens > 0
    assert root_attributes["gen_ai.usage.output_tokens"] == parent.output_tokens > 0
    assert root.status.code == Status.STATUS_CODE_UNSET
    assert root.start_time_unix_nano == int(parent.started_at.timestamp() * 1e9)
    assert root.end_time_unix_nano == int(parent.ended_at.timestamp() * 1e9)

    # The concierge's turns are chat spans under its run; its call of the assistant
    # an execute_tool span, and the assistant's run hangs below that call.
    delegation = ToolCall.objects.get(run=parent)
    call_span, _ = by_id[span_id(delegation.pk)]
    assert call_span.name == f"execute_tool {delegation.name}"
    assert call_span.parent_span_id == span_id(parent.pk)
    call_attributes = attributes(call_span.attributes)
    assert call_attributes["gen_ai.operation.name"] == "execute_tool"
    assert call_attributes["gen_ai.tool.name"] == delegation.name
    assert call_attributes["gen_ai.tool.call.id"] == delegation.call_id
    assert call_attributes["gen_ai.tool.type"] == "function"
    assert call_span.status.code == Status.STATUS_CODE_UNSET

    child_span, _ = by_id[span_id(child.pk)]
    assert child_span.name == "invoke_agent assistant"
    assert child_span.parent_span_id == span_id(delegation.pk)
    assert attributes(child_span.attributes)["goaai.parent_run.id"] == str(parent.pk)

    for turn in Turn.objects.filter(run__in=[parent, child]):
        turn_span, _ = by_id[span_id(turn.pk)]
        assert turn_span.name == "chat scripted"
        assert turn_span.kind == Span.SPAN_KIND_CLIENT
        assert turn_span.parent_span_id == span_id(turn.run_id)
        turn_attributes = attributes(turn_span.attributes)
        assert turn_attributes["gen_ai.operation.name"] == "chat"
        assert turn_attributes["gen_ai.request.model"] == "scripted"
        assert turn_attributes["gen_ai.response.model"] == turn.response_model or "scripted"
        assert turn_attributes["gen_ai.usage.input_tokens"] == turn.input_tokens
        assert turn_attributes["gen_ai.usage.output_tokens"] == turn.output_tokens
        assert turn_attributes["gen_ai.response.finish_reasons"] == [turn.finish_reason]
        assert turn_attributes["gen_ai.conversation.id"] == str(parent.session_id)

    # The failed calculator call: an error span, with the error's kind and message.
    failed = ToolCall.objects.get(run=child, name="calculator")
    assert failed.status == "failed"
    failed_span, _ = by_id[span_id(failed.pk)]
    assert failed_span.parent_span_id == span_id(child.pk)
    assert failed_span.status.code == Status.STATUS_CODE_ERROR
    assert failed_span.status.message == failed.error_message
    assert attributes(failed_span.attributes)["error.type"] == failed.error_kind

    # No content unless asked for.
    every_key = {key for span, _ in by_id.values() for key in attributes(span.attributes)}
    assert not every_key & {"gen_ai.input.messages", "gen_ai.tool.call.arguments"}


@pytest.mark.django_db(transaction=True)
def test_model_calls_are_measured(exporting, concierge_run):
    assert telemetry.flush()
    turns = list(Turn.objects.filter(run__session=concierge_run.session))
    units = exporting.metric_units()
    assert units["gen_ai.client.token.usage"] == ("{token}", list(telemetry.TOKEN_BUCKETS))
    assert units["gen_ai.client.operation.duration"] == ("s", list(telemetry.DURATION_BUCKETS))

    durations = exporting.histogram_points("gen_ai.client.operation.duration")
    assert len(durations) == 1
    (labels, count, total) = durations[0]
    assert labels == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "goaai.scripted",
        "gen_ai.request.model": "scripted",
        "gen_ai.response.model": turns[0].response_model or "scripted",
    }
    assert count == len(turns) == 4
    assert total == pytest.approx(sum(turn.latency_ms for turn in turns) / 1000)

    tokens = {
        point[0]["gen_ai.token.type"]: point[1:]
        for point in exporting.histogram_points("gen_ai.client.token.usage")
    }
    assert tokens == {
        "input": (4, sum(turn.input_tokens for turn in turns)),
        "output": (4, sum(turn.output_tokens for turn in turns)),
    }


@pytest.mark.django_db(transaction=True)
def test_a_failed_run_is_an_error_span(exporting, owner, inline_runtime):
    session = rt.create_session(owner=owner, agent="assistant")
    info = rt.run("assistant", f"flaky echo {uuid.uuid4()}", session=session.id)
    run = Run.objects.get(pk=info.id)
    assert run.status == "failed"
    assert telemetry.flush()
    by_id = {span.span_id: span for span, _ in exporting.spans()}
    run_span = by_id[span_id(run.pk)]
    assert run_span.status.code == Status.STATUS_CODE_ERROR
    assert run_span.status.message == run.error_message
    assert attributes(run_span.attributes)["error.type"] == run.error_kind
    (turn,) = Turn.objects.filter(run=run)
    turn_span = by_id[span_id(turn.pk)]
    assert turn_span.status.code == Status.STATUS_CODE_ERROR
    assert attributes(turn_span.attributes)["error.type"] == run.error_kind
    (labels, count, _) = exporting.histogram_points("gen_ai.client.operation.duration")[0]
    assert (labels["error.type"], count) == (run.error_kind, 1)
    assert not exporting.histogram_points("gen_ai.client.token.usage")


@pytest.mark.django_db(transaction=True)
def test_content_is_captured_only_when_asked(exporting, settings, owner, inline_runtime):
    settings.GOAAI_OTEL_CAPTURE_CONTENT = True
    session = rt.create_session(owner=owner, agent="assistant")
    info = rt.run("assistant", "calculate 6*7", session=session.id)
    assert telemetry.flush()
    spans = {span.span_id: attributes(span.attributes) for span, _ in exporting.spans()}
    run_attributes = spans[span_id(info.id)]
    assert json.loads(run_attributes["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "calculate 6*7"}]}
    ]
    first, second = Turn.objects.filter(run_id=info.id).order_by("index")
    asked = spans[span_id(first.pk)]
    assert json.loads(asked["gen_ai.system_instructions"])[0]["content"].startswith(
        "You are goaai's assistant."
    )
    assert {"role": "user", "parts": [{"type": "text", "content": "calculate 6*7"}]} in json.loads(
        asked["gen_ai.input.messages"]
    )
    (reply,) = json.loads(asked["gen_ai.output.messages"])
    assert reply["parts"][0]["type"] == "tool_call"
    assert reply["parts"][0]["name"] == "calculator"
    call = ToolCall.objects.get(run_id=info.id)
    assert json.loads(spans[span_id(call.pk)]["gen_ai.tool.call.arguments"]) == call.arguments
    assert json.loads(spans[span_id(call.pk)]["gen_ai.tool.call.result"]) == call.result
    answered = json.loads(spans[span_id(second.pk)]["gen_ai.input.messages"])
    assert answered[-1]["parts"][0]["type"] == "tool_call_response"


@pytest.mark.django_db(transaction=True)
def test_nothing_is_set_up_without_an_endpoint(settings, receiver, owner, inline_runtime):
    telemetry.shutdown()
    settings.GOAAI_OTEL_TRACES_ENDPOINT = ""
    settings.GOAAI_OTEL_METRICS_ENDPOINT = ""
    session = rt.create_session(owner=owner, agent="assistant")
    assert rt.run("assistant", "calculate 6*7", session=session.id).status == "completed"
    assert telemetry.pipeline() is None
    assert telemetry._pipeline is None
    assert not [t for t in threading.enumerate() if t.name == "goaai-telemetry"]
    assert receiver.headers == []


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.django_db(transaction=True)
def test_runs_complete_when_the_collector_is_down(settings, owner, inline_runtime, caplog):
    telemetry.shutdown()
    down = f"http://127.0.0.1:{_closed_port()}"
    settings.GOAAI_OTEL_TRACES_ENDPOINT = f"{down}/v1/traces"
    settings.GOAAI_OTEL_METRICS_ENDPOINT = f"{down}/v1/metrics"
    session = rt.create_session(owner=owner, agent="assistant")
    try:
        started = time.monotonic()
        info = rt.run("assistant", "calculate 6*7", session=session.id)
        took = time.monotonic() - started
        assert (info.status, info.output) == ("completed", "6*7 = 42")
        # The run does not wait for the export, which the exporter retries.
        assert took < 2.0
        current = telemetry.pipeline()
        assert current is not None
        assert current.drain(timeout=10)
        assert telemetry.flush(timeout=0.5) is False
    finally:
        started = time.monotonic()
        telemetry.shutdown()
        # A process that exits does not hang on the collector either.
        assert time.monotonic() - started < telemetry.SHUTDOWN_SECONDS + 2
    refused = [r for r in caplog.records if r.name.startswith("opentelemetry.exporter")]
    assert any("/v1/traces" in r.getMessage() for r in refused)


@pytest.mark.django_db(transaction=True)
def test_reading_a_run_takes_the_same_queries_however_many_steps(
    exporting, owner, inline_runtime, django_assert_num_queries
):
    session = rt.create_session(owner=owner, agent="assistant")
    short = rt.run("assistant", "echo hi", session=session.id)
    # The first run is exported before the second starts: the suite's in-memory
    # SQLite answers a reader beside a writer with "table is locked" (see above).
    assert telemetry.flush()
    long = rt.run(
        "assistant", "together: echo hi; calculate 6*7; what time is it", session=session.id
    )
    assert ToolCall.objects.filter(run_id=long.id).count() == 3
    assert telemetry.flush()
    current = telemetry.pipeline()
    assert current is not None
    for info in (short, long):
        # The run, its turns, their tool calls.
        with django_assert_num_queries(3):
            telemetry.emit_run(current, run_id=info.id)
