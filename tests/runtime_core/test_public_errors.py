"""What a person chatting is told of a failed run: a plain sentence per kind of error
from a model or a service, never the provider's own words; goaai's own reasons as
they are. The run itself keeps the detail, for operators."""

from __future__ import annotations

from typing import Any

import pytest

from goaai.runtime import payloads, retry
from goaai.runtime.errors import ModelError
from goaai.runtime.inmemory_store import InMemoryRunStore
from goaai.runtime.models.errors import connection_error, status_error, timeout_error
from goaai.runtime.public_errors import ERROR_SENTENCES, UNKNOWN_ERROR, public_error_message
from goaai.runtime.vocabulary import ErrorKind, EventType, RunStatus
from tests.runtime_core.test_model_retries import Retries, ScriptedFailures

INTERNAL_URL = "http://10.0.0.5:8080/v1/chat/completions"
RAW = f"openai: cannot reach {INTERNAL_URL}: Connection error: [Errno 111] Connection refused"


@pytest.mark.parametrize(
    ("error", "sentence"),
    [
        (
            status_error("openai", 429, {"error": {"message": "Slow down, org-123"}}),
            "The model is busy right now. Try again in a moment.",
        ),
        (connection_error("openai", INTERNAL_URL, "[Errno 111] Connection refused"), None),
        (status_error("anthropic", 529, {"type": "overloaded_error"}), None),
        (timeout_error("openai", 60), "The model took too long to answer. Try again in a moment."),
        (status_error("openai", 500, "Traceback (most recent call last): ..."), None),
        (status_error("openai", 400, {"error": {"message": "context too long: 99k"}}), None),
        (status_error("openai", 418, "teapot"), None),
    ],
)
def test_provider_errors_are_told_in_plain_words(error: ModelError, sentence: str | None) -> None:
    told = public_error_message(kind=error.kind, message=error.message)
    assert told == ERROR_SENTENCES[error.kind]
    if sentence is not None:
        assert told == sentence
    for internal in ("10.0.0.5", "Errno", "http", "org-123", "Traceback", "99k", "openai"):
        assert internal not in told


def test_every_error_kind_has_a_sentence_or_goaais_own_words() -> None:
    for kind in ErrorKind:
        told = public_error_message(kind=kind, message=RAW)
        if kind in (ErrorKind.DOMAIN_REJECTION, ErrorKind.TRUNCATED):
            assert told == RAW  # goaai's own reasons (a policy limit, a reply cut off)
        else:
            assert told == ERROR_SENTENCES[kind]
    assert public_error_message(kind="something_new", message=RAW) == UNKNOWN_ERROR
    assert public_error_message(kind="", message="") == UNKNOWN_ERROR


def test_goaais_own_reasons_are_kept() -> None:
    limit = "The agent did not answer within 10 turns."
    assert public_error_message(kind=ErrorKind.DOMAIN_REJECTION, message=limit) == limit
    cut = "The model's reply was cut off by the length limit (1024 output tokens) 3 times."
    assert public_error_message(kind=ErrorKind.TRUNCATED, message=cut) == cut
    budget = "The run exceeded its time budget of 120s."
    told = public_error_message(kind=ErrorKind.TIMEOUT, message=budget, status=RunStatus.TIMED_OUT)
    assert told == budget
    # The same kind from a model that did not answer in time is the model's fault.
    assert (
        public_error_message(kind=ErrorKind.TIMEOUT, message=budget) == ERROR_SENTENCES["timeout"]
    )


def test_the_end_event_carries_the_sentence_and_the_kind() -> None:
    event_type, data = payloads.run_ended(
        status=RunStatus.FAILED, error_kind=ErrorKind.UNAVAILABLE, error_message=RAW, retryable=True
    )
    assert event_type == EventType.RUN_FAILED
    assert data["error"] == {
        "kind": "unavailable",
        "message": ERROR_SENTENCES["unavailable"],
        "retryable": True,
    }
    assert "10.0.0.5" not in str(data)


def _unreachable() -> ModelError:
    return ModelError(ErrorKind.UNAVAILABLE, RAW, retryable=True)


@pytest.fixture
def retries(store: InMemoryRunStore, monkeypatch: pytest.MonkeyPatch) -> Retries:
    monkeypatch.setattr(retry, "FIRST_BACKOFF_SECONDS", 0.001)
    monkeypatch.setattr(retry, "MAX_BACKOFF_SECONDS", 0.004)
    return Retries(store)


def test_a_run_the_provider_failed_tells_its_owner_plainly_and_keeps_the_detail(
    retries: Retries,
) -> None:
    model = ScriptedFailures(*[_unreachable() for _ in range(10)])

    run_id, info = retries.run(model)

    assert info.status == RunStatus.FAILED
    # The run keeps what happened, for operators.
    assert info.error is not None
    assert info.error.message == RAW
    # What its owner reads in the events does not.
    events: list[dict[str, Any]] = [
        e for e in retries.store.events(retries.session_id) if e["run"] == str(run_id)
    ]
    assert {EventType.MODEL_RETRY, EventType.RUN_FAILED} <= {e["type"] for e in events}
    assert "10.0.0.5" not in str([e["data"] for e in events])
    assert "Errno" not in str([e["data"] for e in events])
    (failed,) = retries.events(EventType.RUN_FAILED)
    assert failed["error"]["kind"] == "unavailable"
    assert failed["error"]["message"] == ERROR_SENTENCES["unavailable"]
    assert failed["error"]["retryable"] is True
    for retried in retries.events(EventType.MODEL_RETRY):
        assert retried["message"] == ERROR_SENTENCES["unavailable"]
