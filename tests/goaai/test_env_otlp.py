"""Where telemetry goes, by OpenTelemetry's standard variables (goaai.env)."""

from __future__ import annotations

import logging

import pytest
from django.core.exceptions import ImproperlyConfigured

from goaai.env import env_otlp_endpoint

OTEL_VARIABLES = (
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    "OTEL_METRICS_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
)


@pytest.fixture(autouse=True)
def _no_otel_variables(monkeypatch):
    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_nothing_is_exported_without_an_endpoint():
    assert env_otlp_endpoint("traces") == ""
    assert env_otlp_endpoint("metrics") == ""


def test_the_base_endpoint_gets_each_signals_path(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")
    assert env_otlp_endpoint("traces") == "http://collector:4318/v1/traces"
    assert env_otlp_endpoint("metrics") == "http://collector:4318/v1/metrics"


def test_a_signals_own_endpoint_is_used_as_it_is(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://traces.example/otlp")
    assert env_otlp_endpoint("traces") == "https://traces.example/otlp"
    assert env_otlp_endpoint("metrics") == "http://collector:4318/v1/metrics"
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT")
    assert env_otlp_endpoint("metrics") == ""


def test_the_standard_switches_turn_export_off(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    assert env_otlp_endpoint("traces") == "http://collector:4318/v1/traces"
    assert env_otlp_endpoint("metrics") == ""
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert env_otlp_endpoint("traces") == ""


def test_http_protobuf_is_the_protocol(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    assert env_otlp_endpoint("traces") == "http://collector:4318/v1/traces"


def test_another_protocol_leaves_that_signal_off_with_a_warning(monkeypatch, caplog):
    # grpc is a common injected default; goaai must start anyway, without telemetry
    # for that signal, and say why.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")
    with caplog.at_level(logging.WARNING, logger="goaai.env"):
        assert env_otlp_endpoint("traces") == ""
        assert env_otlp_endpoint("metrics") == "http://collector:4317/v1/metrics"
    (warning,) = caplog.records
    assert warning.levelno == logging.WARNING
    assert "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL" in warning.getMessage()
    assert "'grpc'" in warning.getMessage()
    assert "traces are not exported" in warning.getMessage()

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    with caplog.at_level(logging.WARNING, logger="goaai.env"):
        assert env_otlp_endpoint("metrics") == ""
    assert "OTEL_EXPORTER_OTLP_PROTOCOL" in caplog.records[-1].getMessage()


def test_an_endpoint_that_is_no_url_is_refused(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318")
    with pytest.raises(ImproperlyConfigured, match="http"):
        env_otlp_endpoint("traces")
