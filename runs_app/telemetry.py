"""OpenTelemetry traces and metrics of runs, after the GenAI semantic conventions.

Exported over OTLP/HTTP only when the deployment sets the standard
``OTEL_EXPORTER_OTLP_ENDPOINT`` (or the traces/metrics-specific variable, see
``goaai.env.env_otlp_endpoint``); without it nothing is set up and a run's end
costs one settings lookup.

Every run becomes, once it has ended and its end is committed, one
``invoke_agent <agent>`` span holding a ``chat <model>`` span per turn and an
``execute_tool <tool>`` span per tool call; a child run (an agent called as a tool)
hangs below the ``execute_tool`` span of the call that started it. The spans are
built from the committed record, not live from the loop, because a run may wait
for a person and continue in another process or worker, and a worker may die and
another continue the run: only the record has the whole run, and its end happens
exactly once (a compare-and-set in ``runs_app.services``). The metrics
``gen_ai.client.token.usage`` and ``gen_ai.client.operation.duration`` are
recorded per model call from the same record at the same moment.

The ids are chosen, not drawn, so that one trace holds a run and every run below it
even when they end in different processes: the trace id is the top-level run's UUID
(128 bits), a span's id the lower 64 bits of its record's UUID (run, turn, tool
call). The SDK takes ids only from its ``IdGenerator``; :class:`_PlannedIds` hands
it the planned pair for each span it starts.

Nothing here may slow or fail a run: the run-end hook only puts the run's id on a
bounded queue; a background thread reads the record and hands the spans to the
SDK's batch processor, whose own thread exports them with the exporter's timeout.
A collector that is down costs log lines and dropped telemetry, never a run.

Prompts, replies, tool arguments and results are left out unless
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is true (the conventions'
opt-in), because they are the users' data.

goaai uses providers of its own rather than OpenTelemetry's global ones: its spans
need the planned ids, which a global provider would impose on every other
instrumentation of the process.
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import datetime as dt
import json
import logging
import os
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any
from urllib.parse import urlsplit
from uuid import UUID

from celery.signals import worker_process_init, worker_process_shutdown
from django.conf import settings
from django.db import connections
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.metrics import Histogram
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import SERVICE_INSTANCE_ID, SERVICE_NAME, SERVICE_VERSION, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.sdk.trace.sampling import Decision
from opentelemetry.trace import SpanKind, Status, StatusCode

from goaai.database import retrying
from goaai.runtime import rt
from goaai.runtime.config import ConfigError
from goaai.runtime.types import Usage
from goaai.runtime.vocabulary import RunStatus, ToolCallStatus
from runs_app import selectors
from runs_app.models import Run, ToolCall, Turn

logger = logging.getLogger(__name__)

# The GenAI semantic conventions' names (kept here: the semantic-conventions
# package marks its gen_ai module as moved to the GenAI conventions' own repository).
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
FINISH_REASONS = "gen_ai.response.finish_reasons"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS = "gen_ai.usage.cache_read.input_tokens"
CACHE_WRITE_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
REASONING_TOKENS = "gen_ai.usage.reasoning.output_tokens"
CONVERSATION_ID = "gen_ai.conversation.id"
AGENT_ID = "gen_ai.agent.id"
AGENT_NAME = "gen_ai.agent.name"
AGENT_VERSION = "gen_ai.agent.version"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
TOKEN_TYPE = "gen_ai.token.type"  # noqa: S105 (a token count's kind, no secret)
ERROR_TYPE = "error.type"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
# Opt-in content (OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT).
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_RESULT = "gen_ai.tool.call.result"

INVOKE_AGENT, CHAT, EXECUTE_TOOL = "invoke_agent", "chat", "execute_tool"
TOKEN_USAGE_METRIC = "gen_ai.client.token.usage"  # noqa: S105
DURATION_METRIC = "gen_ai.client.operation.duration"
# The conventions' advisory bucket boundaries for those two histograms.
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304,
                 16777216, 67108864)  # fmt: skip
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24,
                    20.48, 40.96, 81.92)  # fmt: skip

# The provider of each model profile kind; the offline model and a deployment's own
# client class are goaai's.
PROVIDER_OF_KIND = {"openai": "openai", "openai-responses": "openai", "anthropic": "anthropic"}
SCRIPTED_PROVIDER = "goaai.scripted"
CUSTOM_PROVIDER = "goaai.python"

# Runs waiting to be turned into telemetry; beyond this many (a collector far
# behind is not the cause: the SDK queues spans apart), a run's telemetry is dropped
# rather than its memory kept.
QUEUE_SIZE = 10_000
# How long a process that exits waits for what it still has to export.
SHUTDOWN_SECONDS = 5.0
# Longest error description put on a span.
MAX_DESCRIPTION = 1000
_STOP = object()
_LOW_64 = (1 << 64) - 1


@dataclass(frozen=True)
class TelemetryConfig:
    """What the settings ask for; empty endpoints: that signal is not exported."""

    traces_endpoint: str = ""
    metrics_endpoint: str = ""
    capture_content: bool = False

    @property
    def enabled(self) -> bool:
        return bool(self.traces_endpoint or self.metrics_endpoint)

    @classmethod
    def from_settings(cls) -> TelemetryConfig:
        return cls(
            traces_endpoint=settings.GOAAI_OTEL_TRACES_ENDPOINT,
            metrics_endpoint=settings.GOAAI_OTEL_METRICS_ENDPOINT,
            capture_content=settings.GOAAI_OTEL_CAPTURE_CONTENT,
        )


# The (trace id, span id) the next span started in this context must get.
_planned: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "goaai_planned_span_ids", default=None
)


class _PlannedIds(IdGenerator):
    """The ids :func:`_planned` holds, random ones when it holds none."""

    _random = RandomIdGenerator()

    def generate_span_id(self) -> int:
        planned = _planned.get()
        return planned[1] if planned else self._random.generate_span_id()

    def generate_trace_id(self) -> int:
        planned = _planned.get()
        return planned[0] if planned else self._random.generate_trace_id()

    def is_trace_id_random(self) -> bool:
        # Trace ids are version 4 UUIDs: their 56 lowest bits are random.
        return True


def span_id_of(record_id: UUID) -> int:
    """The span id of a run, turn or tool call: the lower 64 bits of its UUID."""
    return (record_id.int & _LOW_64) or 1


def trace_id_of(root_run_id: UUID) -> int:
    """The trace id of a top-level run and every run below it: its UUID."""
    return root_run_id.int or 1


def _resource() -> Resource:
    """The standard resource (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES), named
    goaai unless those name it, with an instance id per process: metrics are
    cumulative per process, and two processes' series must not look like one."""
    found = Resource.create()
    extra: dict[str, str] = {}
    if str(found.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        extra[SERVICE_NAME] = "goaai"
    if SERVICE_INSTANCE_ID not in found.attributes:
        extra[SERVICE_INSTANCE_ID] = str(uuid.uuid4())
    if SERVICE_VERSION not in found.attributes:
        with contextlib.suppress(metadata.PackageNotFoundError):
            extra[SERVICE_VERSION] = metadata.version("goaai")
    return found.merge(Resource(extra))


class _Pipeline:
    """One process's exporters and the thread that turns ended runs into telemetry."""

    def __init__(self, config: TelemetryConfig) -> None:
        self.config = config
        self.pid = os.getpid()
        self.queue: queue.Queue[object] = queue.Queue(maxsize=QUEUE_SIZE)
        resource = _resource()
        self.exporters: list[OTLPSpanExporter | OTLPMetricExporter] = []
        self.tracer_provider: TracerProvider | None = None
        self.tracer: trace.Tracer | None = None
        if config.traces_endpoint:
            self.tracer_provider = TracerProvider(resource=resource, id_generator=_PlannedIds())
            # The batch processor's queue is bounded and it exports from its own
            # thread (OTEL_BSP_* tune it): a slow or absent collector drops spans.
            span_exporter = OTLPSpanExporter(endpoint=config.traces_endpoint)
            self.exporters.append(span_exporter)
            self.tracer_provider.add_span_processor(BatchSpanProcessor(span_exporter))
            self.tracer = self.tracer_provider.get_tracer("goaai")
        self.meter_provider: MeterProvider | None = None
        self.token_usage: Histogram | None = None
        self.duration: Histogram | None = None
        if config.metrics_endpoint:
            metric_exporter = OTLPMetricExporter(endpoint=config.metrics_endpoint)
            self.exporters.append(metric_exporter)
            reader = PeriodicExportingMetricReader(metric_exporter)
            self.meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
            meter = self.meter_provider.get_meter("goaai")
            self.token_usage = meter.create_histogram(
                TOKEN_USAGE_METRIC,
                unit="{token}",
                description="Number of input and output tokens used.",
                explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
            )
            self.duration = meter.create_histogram(
                DURATION_METRIC,
                unit="s",
                description="GenAI operation duration.",
                explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
            )
        self.thread = threading.Thread(target=self._work, name="goaai-telemetry", daemon=True)
        self.thread.start()

    def _work(self) -> None:
        while True:
            item = self.queue.get()
            try:
                if item is _STOP:
                    return
                if isinstance(item, UUID):
                    self._emit(item)
            except Exception:
                logger.exception("The telemetry of run %s could not be emitted", item)
            finally:
                if self.queue.empty():
                    # Idle: give the connection back (a pooled one to its pool).
                    connections.close_all()
                self.queue.task_done()

    def _emit(self, run_id: UUID) -> None:
        # A database that is restarting or busy gets a few short retries before the
        # run's telemetry is given up.
        retrying(lambda: emit_run(self, run_id=run_id), what=f"Telemetry of run {run_id}")

    def drain(self, timeout: float) -> bool:
        """Wait until every queued run has been emitted; ``False`` on timeout."""
        deadline = time.monotonic() + timeout
        with self.queue.all_tasks_done:
            while self.queue.unfinished_tasks:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self.queue.all_tasks_done.wait(remaining)
        return True

    def flush(self, timeout: float) -> bool:
        """Emit the queued runs and export everything; ``False`` when that took
        longer than ``timeout`` (a collector that is down: the exporter retries
        until its own timeout, ``OTEL_EXPORTER_OTLP_TIMEOUT``, in the background)."""
        deadline = time.monotonic() + timeout
        if not self.drain(timeout):
            return False
        return _within(deadline - time.monotonic(), self._force_flush)

    def _force_flush(self) -> None:
        if self.tracer_provider is not None:
            self.tracer_provider.force_flush()
        if self.meter_provider is not None:
            self.meter_provider.force_flush()

    def shutdown(self, timeout: float) -> None:
        """Export what is left and stop, within about ``timeout`` even when the
        collector is down (a process about to exit must not hang on it)."""
        if self.pid != os.getpid():
            self.abandon()
            return
        deadline = time.monotonic() + timeout
        self.drain(timeout)
        with contextlib.suppress(queue.Full):
            self.queue.put(_STOP, timeout=max(deadline - time.monotonic(), 0.01))
        self.thread.join(max(deadline - time.monotonic(), 0.01))
        if not _within(max(deadline - time.monotonic(), 0.01), self._stop_providers):
            # Still exporting to a collector that does not answer: stopping the
            # exporters ends their retries.
            for exporter in self.exporters:
                with contextlib.suppress(Exception):
                    exporter.shutdown()

    def abandon(self) -> None:
        """Stop, sending nothing, a pipeline inherited through a fork: what it holds
        is its parent's to send (the SDK restarts its threads in the child)."""
        for exporter in self.exporters:
            with contextlib.suppress(Exception):
                exporter.shutdown()
        _within(1.0, self._stop_providers)

    def _stop_providers(self) -> None:
        if self.tracer_provider is not None:
            self.tracer_provider.shutdown()
        if self.meter_provider is not None:
            self.meter_provider.shutdown()


def _within(timeout: float, work: Callable[[], None]) -> bool:
    """Do ``work`` on a thread of its own; whether it finished within ``timeout``."""
    worker = threading.Thread(target=work, name="goaai-telemetry-flush", daemon=True)
    worker.start()
    worker.join(max(timeout, 0.0))
    return not worker.is_alive()


_lock = threading.Lock()
_pipeline: _Pipeline | None = None
_atexit_registered = False


def pipeline() -> _Pipeline | None:
    """This process's pipeline, set up on first use when the settings ask for
    telemetry (and again after a fork, or when the settings changed); ``None``
    when they do not."""
    global _pipeline, _atexit_registered
    config = TelemetryConfig.from_settings()
    current = _pipeline
    if not config.enabled:
        return None
    if current is not None and current.pid == os.getpid() and current.config == config:
        return current
    with _lock:
        current = _pipeline
        if current is None or current.pid != os.getpid() or current.config != config:
            if current is not None:
                # Inherited through a fork (abandoned), or the settings changed.
                current.shutdown(SHUTDOWN_SECONDS)
            current = _pipeline = _Pipeline(config)
            if not _atexit_registered:
                atexit.register(shutdown)
                _atexit_registered = True
        return current


def run_ended(*, run_id: UUID) -> None:
    """The hook of a run's end, called once its end is committed: the run's
    telemetry is emitted in the background. Never raises and never blocks."""
    try:
        current = pipeline()
        if current is not None:
            current.queue.put_nowait(run_id)
    except queue.Full:
        logger.warning("Telemetry is behind: run %s is left out of it", run_id)
    except Exception:
        logger.exception("Telemetry could not take run %s", run_id)


def flush(timeout: float = 10.0) -> bool:
    """Emit the ended runs still queued and export everything now (tests,
    benchmarks); ``False`` if that took longer than ``timeout``."""
    current = _pipeline
    if current is None or current.pid != os.getpid():
        return True
    return current.flush(timeout)


def shutdown() -> None:
    """Export what is left and stop this process's exporters (at exit)."""
    global _pipeline
    with _lock:
        current, _pipeline = _pipeline, None
    if current is not None:
        current.shutdown(SHUTDOWN_SECONDS)


def _after_fork() -> None:
    # A fork copies the lock as it was, perhaps held by another thread; the child
    # finds the parent's pipeline by its pid and replaces it on first use.
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork)


@worker_process_init.connect
def _forked_worker(**_: Any) -> None:
    """A Celery pool process sets up exporters of its own as it starts (its
    parent's threads did not come with the fork), before its first run."""
    pipeline()


@worker_process_shutdown.connect
def _worker_exits(**_: Any) -> None:
    # Pool processes leave through os._exit, without atexit handlers.
    shutdown()


# From the record to spans and metrics


@dataclass(frozen=True)
class _Model:
    """A model as the conventions name it: its provider, its name at the provider,
    and the server it was reached at when the deployment set one."""

    provider: str
    name: str
    profile: str = ""
    address: str = ""
    port: int | None = None

    def attributes(self) -> dict[str, Any]:
        found: dict[str, Any] = {PROVIDER: self.provider, REQUEST_MODEL: self.name}
        if self.profile:
            found["goaai.model.profile"] = self.profile
        if self.address:
            found[SERVER_ADDRESS] = self.address
            if self.port is not None:
                found[SERVER_PORT] = self.port
        return found


def model_of(model: str) -> _Model:
    """``scripted``, ``python:<class>`` or ``<profile>:<model>`` as a :class:`_Model`."""
    if model == "scripted" or not model:
        return _Model(SCRIPTED_PROVIDER, model or "scripted")
    if model.startswith("python:"):
        return _Model(CUSTOM_PROVIDER, model.removeprefix("python:"))
    name, _, model_name = model.partition(":")
    try:
        profile = rt.config.profile(name)
    except ConfigError:
        return _Model(name, model_name or model, profile=name)
    address, port = "", None
    if profile.base_url:
        parts = urlsplit(profile.base_url)
        address, port = parts.hostname or "", parts.port
    return _Model(
        PROVIDER_OF_KIND.get(profile.kind, profile.kind),
        model_name,
        profile=name,
        address=address,
        port=port,
    )


def _ns(moment: dt.datetime) -> int:
    return int(moment.timestamp() * 1_000_000_000)


def _usage_attributes(usage: Usage) -> dict[str, int]:
    # The conventions count every prompt token as input, cached or not, and the
    # reasoning as part of the output (as goaai's output_tokens do).
    found = {INPUT_TOKENS: usage.prompt_tokens, OUTPUT_TOKENS: usage.output_tokens}
    if usage.cached_input_tokens:
        found[CACHE_READ_TOKENS] = usage.cached_input_tokens
    if usage.cache_write_tokens:
        found[CACHE_WRITE_TOKENS] = usage.cache_write_tokens
    if usage.reasoning_tokens:
        found[REASONING_TOKENS] = usage.reasoning_tokens
    return found


def _text_parts(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "content": text}] if text else []


def _message(stored: Mapping[str, Any]) -> dict[str, Any]:
    """A stored message (``goaai.runtime.types.Message.as_dict``) in the conventions'
    shape: a role and its parts."""
    role = str(stored.get("role", ""))
    content = str(stored.get("content") or "")
    if role == "tool":
        parts = [
            {
                "type": "tool_call_response",
                "id": stored.get("tool_call_id", ""),
                "response": content,
            }
        ]
    else:
        parts = _text_parts(content) + _tool_call_parts(stored.get("tool_calls"))
    return {"role": role, "parts": parts}


def _tool_call_parts(calls: Any) -> list[dict[str, Any]]:
    if not isinstance(calls, list):
        return []
    return [
        {
            "type": "tool_call",
            "id": call.get("id", ""),
            "name": call.get("name", ""),
            "arguments": call.get("arguments"),
        }
        for call in calls
        if isinstance(call, Mapping)
    ]


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _turn_content(turn: Turn) -> dict[str, str]:
    stored = [m for m in turn.request_messages or [] if isinstance(m, Mapping)]
    system = [
        part
        for m in stored
        if m.get("role") == "system"
        for part in _text_parts(str(m.get("content") or ""))
    ]
    messages = [_message(m) for m in stored if m.get("role") != "system"]
    reply: dict[str, Any] = {
        "role": "assistant",
        "parts": _text_parts(turn.response_text) + _tool_call_parts(turn.response_tool_calls),
    }
    if turn.finish_reason:
        reply["finish_reason"] = turn.finish_reason
    found = {INPUT_MESSAGES: _json(messages), OUTPUT_MESSAGES: _json([reply])}
    if system:
        found[SYSTEM_INSTRUCTIONS] = _json(system)
    return found


def _set_error(span: trace.Span, kind: str, message: str) -> None:
    span.set_attribute(ERROR_TYPE, kind or "_OTHER")
    span.set_status(Status(StatusCode.ERROR, message[:MAX_DESCRIPTION] or None))


class _Spans:
    """Starts spans with planned ids on one tracer."""

    def __init__(self, tracer: trace.Tracer, trace_id: int) -> None:
        self.tracer = tracer
        self.trace_id = trace_id

    def start(
        self,
        name: str,
        *,
        record_id: UUID,
        parent: Context,
        kind: SpanKind,
        start: dt.datetime,
        attributes: dict[str, Any],
    ) -> trace.Span:
        token = _planned.set((self.trace_id, span_id_of(record_id)))
        try:
            return self.tracer.start_span(
                name, context=parent, kind=kind, attributes=attributes, start_time=_ns(start)
            )
        finally:
            _planned.reset(token)


def _run_parent(pipeline: _Pipeline, run: Run, trace_id: int) -> Context:
    """The context a run's span starts in: none for a top-level run, the
    ``execute_tool`` span of the call that started a child run (exported by its
    parent's process, perhaps not yet), sampled as its trace is."""
    if run.parent_tool_call_id is None or pipeline.tracer_provider is None:
        return Context()
    decision = pipeline.tracer_provider.sampler.should_sample(
        None, trace_id, f"{INVOKE_AGENT} {run.agent}"
    ).decision
    sampled = decision == Decision.RECORD_AND_SAMPLE
    flags = trace.TraceFlags(
        (trace.TraceFlags.SAMPLED if sampled else trace.TraceFlags.DEFAULT)
        | trace.TraceFlags.RANDOM_TRACE_ID
    )
    parent = trace.SpanContext(
        trace_id, span_id_of(run.parent_tool_call_id), is_remote=True, trace_flags=flags
    )
    return trace.set_span_in_context(trace.NonRecordingSpan(parent), Context())


def _run_attributes(run: Run, model: _Model | None, capture: bool) -> dict[str, Any]:
    found: dict[str, Any] = {
        OPERATION: INVOKE_AGENT,
        AGENT_ID: run.agent,
        AGENT_NAME: run.agent,
        CONVERSATION_ID: str(run.session_id),
        "goaai.run.id": str(run.pk),
        "goaai.run.status": run.status,
        **_usage_attributes(Usage.of(run)),
    }
    if model is not None:
        found.update(model.attributes())
    if run.agent_version_number is not None:
        found[AGENT_VERSION] = str(run.agent_version_number)
    if run.parent_run_id is not None:
        found["goaai.parent_run.id"] = str(run.parent_run_id)
    if run.paused_seconds:
        found["goaai.run.paused_seconds"] = run.paused_seconds
    if run.cancel_reason:
        found["goaai.run.cancel_reason"] = run.cancel_reason
    if capture:
        found[INPUT_MESSAGES] = _json([{"role": "user", "parts": _text_parts(run.input)}])
        found[OUTPUT_MESSAGES] = _json([{"role": "assistant", "parts": _text_parts(run.output)}])
    return found


def _turn_attributes(run: Run, turn: Turn, model: _Model, capture: bool) -> dict[str, Any]:
    found: dict[str, Any] = {
        OPERATION: CHAT,
        CONVERSATION_ID: str(run.session_id),
        "goaai.run.id": str(run.pk),
        "goaai.turn.id": str(turn.pk),
        "goaai.turn.index": turn.index,
        **model.attributes(),
    }
    if turn.ended_at is not None:
        found.update(_usage_attributes(Usage.of(turn)))
        found[RESPONSE_MODEL] = turn.response_model or model.name
    if turn.finish_reason:
        found[FINISH_REASONS] = [turn.finish_reason]
    if turn.retries:
        found["goaai.turn.retries"] = turn.retries
    if capture:
        found.update(_turn_content(turn))
    return found


def _tool_attributes(run: Run, call: ToolCall, capture: bool) -> dict[str, Any]:
    found: dict[str, Any] = {
        OPERATION: EXECUTE_TOOL,
        TOOL_NAME: call.name,
        TOOL_CALL_ID: call.call_id or str(call.pk),
        TOOL_TYPE: "function",
        CONVERSATION_ID: str(run.session_id),
        "goaai.run.id": str(run.pk),
        "goaai.tool_call.id": str(call.pk),
        "goaai.tool_call.status": call.status,
    }
    if call.attempt > 1:
        found["goaai.tool_call.attempt"] = call.attempt
    if call.decision:
        found["goaai.tool_call.decision"] = call.decision
    if capture:
        found[TOOL_ARGUMENTS] = _json(call.arguments)
        if call.result is not None:
            found[TOOL_RESULT] = _json(call.result)
    return found


# Tool calls that ended in an error: failed, or refused by the person asked.
_FAILED_CALLS = frozenset({ToolCallStatus.FAILED, ToolCallStatus.DENIED})
_FAILED_RUNS = frozenset({RunStatus.FAILED, RunStatus.TIMED_OUT})


def emit_run(pipeline: _Pipeline, *, run_id: UUID) -> None:
    """The spans and metrics of one ended run, from its committed record."""
    run = Run.objects.filter(pk=run_id).first()
    if run is None or run.ended_at is None:
        return
    capture = pipeline.config.capture_content
    turns = selectors.run_trace_steps(run_id=run.pk, with_content=capture)
    models = {turn.model: model_of(turn.model) for turn in turns}
    if pipeline.tracer is not None:
        trace_id = trace_id_of(selectors.run_trace_root(run=run))
        _emit_spans(pipeline, _Spans(pipeline.tracer, trace_id), run, turns, models)
    if pipeline.duration is not None and pipeline.token_usage is not None:
        _record_metrics(pipeline.duration, pipeline.token_usage, run, turns, models)


def _emit_spans(
    pipeline: _Pipeline,
    spans: _Spans,
    run: Run,
    turns: Sequence[Turn],
    models: Mapping[str, _Model],
) -> None:
    ended = run.ended_at
    assert ended is not None  # noqa: S101 (emit_run emits ended runs only)
    capture = pipeline.config.capture_content
    first_model = models[turns[0].model] if turns else None
    run_span = spans.start(
        f"{INVOKE_AGENT} {run.agent}",
        record_id=run.pk,
        parent=_run_parent(pipeline, run, spans.trace_id),
        kind=SpanKind.INTERNAL,
        start=run.started_at or run.created_at,
        attributes=_run_attributes(run, first_model, capture),
    )
    inside = trace.set_span_in_context(run_span, Context())
    for turn in turns:
        model = models[turn.model]
        span = spans.start(
            f"{CHAT} {model.name}",
            record_id=turn.pk,
            parent=inside,
            kind=SpanKind.CLIENT,
            start=turn.started_at,
            attributes=_turn_attributes(run, turn, model, capture),
        )
        if turn.ended_at is None and run.status in _FAILED_RUNS:
            # The model call the run failed in (a stopped run's is no error).
            _set_error(span, run.error_kind, run.error_message)
        span.end(end_time=_ns(turn.ended_at or ended))
        _emit_tool_spans(spans, run, turn.tool_calls.all(), inside, capture)
    if run.status in _FAILED_RUNS:
        _set_error(run_span, run.error_kind, run.error_message)
    run_span.end(end_time=_ns(ended))


def _emit_tool_spans(
    spans: _Spans, run: Run, calls: Iterable[ToolCall], parent: Context, capture: bool
) -> None:
    ended = run.ended_at
    assert ended is not None  # noqa: S101 (emit_run emits ended runs only)
    for call in calls:
        span = spans.start(
            f"{EXECUTE_TOOL} {call.name}",
            record_id=call.pk,
            parent=parent,
            kind=SpanKind.INTERNAL,
            start=call.started_at or call.created_at,
            attributes=_tool_attributes(run, call, capture),
        )
        if call.status in _FAILED_CALLS:
            _set_error(span, call.error_kind, call.error_message)
        span.end(end_time=_ns(call.ended_at or ended))


def _record_metrics(
    duration: Histogram,
    token_usage: Histogram,
    run: Run,
    turns: Sequence[Turn],
    models: Mapping[str, _Model],
) -> None:
    """Per model call: how long it took, and the tokens it read and wrote."""
    ended = run.ended_at
    assert ended is not None  # noqa: S101 (emit_run emits ended runs only)
    for turn in turns:
        model = models[turn.model]
        attributes: dict[str, Any] = {OPERATION: CHAT, **model.attributes()}
        attributes.pop("goaai.model.profile", None)
        if turn.ended_at is None:
            # The call the run ended in never answered: it failed, or was stopped.
            failed = run.status in _FAILED_RUNS
            attributes[ERROR_TYPE] = (run.error_kind or "_OTHER") if failed else "canceled"
            seconds = (ended - turn.started_at).total_seconds()
        else:
            attributes[RESPONSE_MODEL] = turn.response_model or model.name
            seconds = (
                turn.latency_ms / 1000
                if turn.latency_ms is not None
                else (turn.ended_at - turn.started_at).total_seconds()
            )
        duration.record(max(seconds, 0.0), attributes)
        if turn.ended_at is not None:
            usage = Usage.of(turn)
            token_usage.record(usage.prompt_tokens, {**attributes, TOKEN_TYPE: "input"})
            token_usage.record(usage.output_tokens, {**attributes, TOKEN_TYPE: "output"})
