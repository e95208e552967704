"""OpenTelemetry's cost to runs: runs per second with telemetry off, exporting to a
live OTLP/HTTP receiver, and with the collector down (its port closed).

    .venv/bin/python bench/telemetry.py [--db sqlite|postgres|both] [--runs N] [--rounds R]

Each run is the assistant asked ``calculate 6*7`` in a new session (two turns and a
calculator call: four spans), executed inline by the real
runtime and recorded by the real services. The three modes alternate round by round,
so that a shared machine's drift hits them alike. The spans and metrics are
exported as a deployment exports them (batch processor, periodic metric reader)
to a receiver in a process of its own,
with short export intervals (``OTEL_BSP_SCHEDULE_DELAY=200``,
``OTEL_METRIC_EXPORT_INTERVAL=1000``) so that exports, and against a closed port the
exporter's retries, happen while runs are being timed. The receiver (an
``http.server``) counts the spans that arrived; the benchmark checks that every
span of the live rounds did.

Target: exporting, and the collector down, each >= 0.9x the runs per second with
telemetry off. The script exits non-zero when that is not met.
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from _common import arguments, median, run_each_database, setup_django

TARGET = 0.9
# The run's invoke_agent span, its two chat spans and its execute_tool span.
SPANS_PER_RUN = 4


def receive(port: Any, spans: Any) -> None:
    """An OTLP/HTTP receiver, in a process of its own as a collector is: it answers
    200 and counts the spans it was sent."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.path == "/v1/traces":
                request = ExportTraceServiceRequest.FromString(body)
                with spans.get_lock():
                    spans.value += sum(
                        len(scope.spans)
                        for resource in request.resource_spans
                        for scope in resource.scope_spans
                    )
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port.value = server.server_address[1]
    server.serve_forever()


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def main() -> int:
    parser = arguments(__doc__ or "")
    parser.add_argument("--runs", type=int, default=30, help="runs per mode per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    extra = ["--runs", str(args.runs), "--rounds", str(args.rounds)]
    if run_each_database(__file__, args, extra):
        return 0
    os.environ["OTEL_BSP_SCHEDULE_DELAY"] = "200"
    os.environ["OTEL_METRIC_EXPORT_INTERVAL"] = "1000"
    setup_django(args.db, args.postgres)
    import logging

    from django.conf import settings
    from django.contrib.auth import get_user_model

    from goaai.runtime import rt
    from runs_app import telemetry

    # The exporter logs every failed attempt against the closed port.
    logging.getLogger("opentelemetry").setLevel(logging.CRITICAL)
    rt.configure(executor="inline")
    owner = get_user_model().objects.create(username="bench")
    port, received = multiprocessing.Value("i", 0), multiprocessing.Value("i", 0)
    receiver = multiprocessing.Process(target=receive, args=(port, received), daemon=True)
    receiver.start()
    while not port.value:
        time.sleep(0.01)
    down = f"http://127.0.0.1:{closed_port()}"
    modes = {"off": "", "exporting": f"http://127.0.0.1:{port.value}", "collector down": down}

    def use(base: str) -> None:
        telemetry.shutdown()
        settings.GOAAI_OTEL_TRACES_ENDPOINT = f"{base}/v1/traces" if base else ""
        settings.GOAAI_OTEL_METRICS_ENDPOINT = f"{base}/v1/metrics" if base else ""

    def runs(count: int) -> float:
        started = time.perf_counter()
        for _ in range(count):
            session = rt.create_session(owner=owner, agent="assistant")
            info = rt.run("assistant", "calculate 6*7", session=session.id)
            assert info.status == "completed", info
        return count / (time.perf_counter() - started)

    use("")
    runs(5)  # warm up: connections, caches, the first agent version
    rates: dict[str, list[float]] = {mode: [] for mode in modes}
    spans_expected = 0
    for _ in range(args.rounds):
        for mode, base in modes.items():
            use(base)
            rates[mode].append(runs(args.runs))
            if mode == "exporting":
                telemetry.flush(timeout=30)
                spans_expected += SPANS_PER_RUN * args.runs
    use("")
    receiver.terminate()
    print(f"\n== telemetry, {args.db}, {args.rounds} rounds x {args.runs} runs per mode ==")
    met = report(rates)
    print(f"spans received  {received.value} of {spans_expected}")
    return 0 if met and received.value == spans_expected else 1


def report(rates: dict[str, list[float]]) -> bool:
    """Print each mode's median rate and its ratio to telemetry off; whether the
    target is met."""
    baseline = median(rates["off"])
    met = True
    for mode, values in rates.items():
        ratio = median(values) / baseline
        rounds = " ".join(f"{value:.1f}" for value in values)
        line = f"{mode:15} {median(values):7.1f} runs/s  {ratio:5.2f}x  rounds: {rounds}"
        if mode != "off":
            line += f"  (target >= {TARGET})"
            met = met and ratio >= TARGET
        print(line)
    return met


if __name__ == "__main__":
    sys.exit(main())
