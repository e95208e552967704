"""``manage.py seed_demo``: synthetic data that is consistent the way the runtime's
own records are, in the amounts asked for, and that the admin can show."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, replace
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db.models import Count, Max, Min
from django.urls import reverse
from django.utils import timezone

from goaai.runtime import loop, rt
from goaai.runtime.agents import ASSISTANT, CONCIERGE, AgentRegistry
from goaai.runtime.errors import ModelError
from goaai.runtime.models import DeltaCallback, ModelRequest
from goaai.runtime.models.scripted import ScriptedModel
from goaai.runtime.types import ModelReply
from goaai.runtime.vocabulary import (
    RUN_END_EVENTS,
    ErrorKind,
    EventType,
    RunStatus,
    SessionStatus,
    ToolCallStatus,
)
from memory_app.models import MemoryEntry, MemoryRevision
from runs_app.models import Run, ToolCall, Turn
from runs_app.seeding import Plan, RunShape, Seeder, SessionShape
from sessions_app.models import RunEvent, Session

pytestmark = pytest.mark.django_db

SESSIONS, RUNS, TURNS, CALLS = 12, 4, 3, 2


def _seed(*extra: str, sessions: int = SESSIONS, seed: int = 7) -> str:
    out = io.StringIO()
    call_command(
        "seed_demo",
        "--sessions",
        str(sessions),
        "--runs-per-session",
        str(RUNS),
        "--turns-per-run",
        str(TURNS),
        "--calls-per-turn",
        str(CALLS),
        "--users",
        "3",
        "--seed",
        str(seed),
        "--active-fraction",
        "0.5",
        *extra,
        stdout=out,
    )
    return out.getvalue()


def test_counts_match_the_arguments_and_are_printed():
    output = _seed()

    awaiting = Run.objects.filter(status=RunStatus.AWAITING_INPUT).count()
    assert Session.objects.count() == SESSIONS
    assert Run.objects.count() == SESSIONS * RUNS
    assert ToolCall.objects.count() == SESSIONS * RUNS * (TURNS - 1) * CALLS
    # A run awaiting approval stops one turn short.
    assert Turn.objects.count() == SESSIONS * RUNS * TURNS - awaiting
    assert f"tool calls {SESSIONS * RUNS * (TURNS - 1) * CALLS:,}" in " ".join(output.split())
    for label, model in [("sessions", Session), ("runs", Run), ("events", RunEvent)]:
        assert f"{label} {model.objects.count():,}" in " ".join(output.split())
    assert set(Session.objects.values_list("owner__username", flat=True)) <= {
        "demo-user-1",
        "demo-user-2",
        "demo-user-3",
    }


def test_each_sessions_log_is_numbered_one_to_n_with_last_event_seq_matching():
    _seed()

    sessions = Session.objects.annotate(
        events_count=Count("events"), first=Min("events__seq"), last=Max("events__seq")
    )
    for session in sessions:
        assert session.events_count > 0
        assert (session.first, session.last) == (1, session.events_count)
        assert session.last_event_seq == session.events_count
        types = list(session.events.order_by("seq").values_list("type", flat=True))
        assert types[0] == EventType.SESSION_CREATED
        if session.status == SessionStatus.ENDED:
            assert types[-1] == EventType.SESSION_ENDED
            assert session.ended_at is not None
        else:
            assert EventType.SESSION_ENDED not in types


def test_each_sessions_last_activity_is_its_newest_event():
    _seed()

    sessions = Session.objects.annotate(newest=Max("events__created_at"))
    assert len({session.last_activity_at for session in sessions}) == SESSIONS
    for session in sessions:
        assert session.last_activity_at == session.newest
        assert session.created_at <= session.last_activity_at <= timezone.now()


def test_each_run_is_logged_in_the_order_a_real_run_writes_it():
    _seed()

    for run in Run.objects.all():
        events = list(run.events.order_by("seq").values_list("type", "created_at"))
        types = [event_type for event_type, _ in events]
        # Created, the label rules that shaped its policy (if any fired), started.
        started = types.index(EventType.RUN_STARTED)
        assert types[0] == EventType.RUN_CREATED
        assert set(types[1:started]) <= {EventType.POLICY_DECISION}
        assert [moment for _, moment in events] == sorted(moment for _, moment in events)
        if run.status == RunStatus.AWAITING_INPUT:
            assert types[-2:] == [
                EventType.TOOL_CALL_APPROVAL_REQUESTED,
                EventType.RUN_AWAITING_INPUT,
            ]
            assert run.awaiting["tool_call"] == str(
                run.tool_calls.get(status=ToolCallStatus.SCHEDULED, requires_approval=True).pk
            )
            assert run.ended_at is None
        else:
            assert types[-1] == RUN_END_EVENTS[RunStatus(run.status)]
            assert run.ended_at is not None
        calls = run.tool_calls.count()
        assert types.count(EventType.TOOL_CALL_SCHEDULED) == calls
        finished = types.count(EventType.TOOL_CALL_SUCCEEDED) + types.count(
            EventType.TOOL_CALL_FAILED
        )
        assert finished == run.tool_calls.exclude(status=ToolCallStatus.SCHEDULED).count()
        assert types.count(EventType.TURN_STARTED) == run.turns.count()
        if run.status == RunStatus.FAILED:
            assert run.error_kind
        if run.status == RunStatus.COMPLETED:
            assert run.output
            assert run.total_tokens == run.input_tokens + run.output_tokens > 0


def test_the_data_looks_like_the_runtimes_own():
    _seed()
    now = timezone.now()

    statuses = set(Run.objects.values_list("status", flat=True))
    assert {RunStatus.COMPLETED, RunStatus.FAILED} <= statuses
    assert {label["tier"] for label in Run.objects.values_list("labels", flat=True)} == {
        "free",
        "paid",
    }
    registry = {name for agent in rt.agents.all() for name in rt.agents.tools_of(agent)}
    assert set(ToolCall.objects.values_list("name", flat=True)) <= registry
    assert ToolCall.objects.filter(status=ToolCallStatus.FAILED).exclude(error_kind="").exists()
    assert not ToolCall.objects.filter(status=ToolCallStatus.SUCCEEDED, result=None).exists()
    for call in ToolCall.objects.select_related("run", "turn"):
        assert (call.session_id, call.turn.run_id) == (call.run.session_id, call.run_id)
    assert Session.objects.filter(created_at__gt=now).count() == 0
    assert RunEvent.objects.filter(created_at__gt=now).count() == 0
    # Memory: what memory_store calls wrote, each change with its revision.
    assert MemoryEntry.objects.exists()
    for entry in MemoryEntry.objects.all():
        versions = list(
            MemoryRevision.objects.filter(entry_id=entry.pk)
            .order_by("version")
            .values_list("version", flat=True)
        )
        assert versions == list(range(1, entry.version + 1))
        assert ToolCall.objects.get(pk=entry.written_by_tool_call_id).name == "memory_store"


def test_seeding_again_adds_to_what_is_there_with_the_same_users():
    _seed(sessions=3)
    _seed(sessions=2)

    assert Session.objects.count() == 5
    assert get_user_model().objects.filter(username__startswith="demo-user-").count() == 3


def test_without_events_the_logs_are_left_empty():
    _seed("--no-events", sessions=3)

    assert not RunEvent.objects.exists()
    assert set(Session.objects.values_list("last_event_seq", flat=True)) == {0}
    assert ToolCall.objects.count() == 3 * RUNS * (TURNS - 1) * CALLS


@pytest.mark.parametrize(
    "url",
    [
        "/admin/runs_app/run/",
        "/admin/runs_app/run/?status__exact=failed&agent=assistant",
        "/admin/runs_app/run/?label=tier%3Apaid",
        "/admin/runs_app/toolcall/",
        "/admin/runs_app/toolcall/?name=calculator",
        "/admin/runs_app/turn/",
        "/admin/sessions_app/runevent/",
        "/admin/sessions_app/session/",
        "/admin/memory_app/memoryentry/",
        "/admin/memory_app/memoryrevision/",
    ],
)
def test_the_admin_changelists_render_over_the_seeded_data(client, staff, url):
    _seed()
    client.force_login(staff)

    response = client.get(url)

    assert response.status_code == 200
    assert response.context["cl"].result_count > 0


def test_a_seeded_runs_page_renders(client, staff):
    _seed(sessions=2)
    client.force_login(staff)
    run = Run.objects.filter(status=RunStatus.COMPLETED).first()

    response = client.get(reverse("admin:runs_app_run_change", args=[run.pk]))

    assert response.status_code == 200
    assert run.input in response.content.decode()


# The seeder and the runtime agree: a seeded run of a kind is recorded as a real run
# of that kind is (the same events in the same order, each with the same keys, and
# the same messages sent to the model), so what the admin and the API show of seeded
# data is what they will show of real data.


class _UnavailableAfterTools(ScriptedModel):
    """The scripted model, whose provider fails once its tools have answered (in
    this run: the earlier runs the history shows have tool results of their own)."""

    def complete(self, request: ModelRequest, on_delta: DeltaCallback | None = None) -> ModelReply:
        question = max(i for i, m in enumerate(request.messages) if m.role == "user")
        if any(message.role == "tool" for message in request.messages[question:]):
            raise ModelError(
                ErrorKind.UNAVAILABLE, "The model provider is unavailable (503).", retryable=True
            )
        return super().complete(request, on_delta)


class _StoppedWhileAnswering(ScriptedModel):
    """The scripted model, whose user presses Stop once it has begun its answer."""

    def complete(self, request: ModelRequest, on_delta: DeltaCallback | None = None) -> ModelReply:
        reply = super().complete(request)
        if reply.tool_calls or on_delta is None:
            return reply
        first, rest = reply.text.split(" ", 1)
        on_delta(f"{first} ")
        stopping = Run.objects.select_related("session").get(status=RunStatus.RUNNING)
        # Its own user presses Stop: the run says who stopped it.
        rt.cancel_run(stopping.pk, reason="canceled by the user", by=stopping.session.owner_id)
        on_delta(rest)
        return reply


FLAKY = replace(
    ASSISTANT, id="flaky", model="python:tests.runs_app.test_seed_demo._UnavailableAfterTools"
)
STOPPED = replace(
    ASSISTANT, id="stopped", model="python:tests.runs_app.test_seed_demo._StoppedWhileAnswering"
)


@dataclass(frozen=True)
class Kind:
    """A kind of run: what a user asks a real agent, and the seeded run like it."""

    name: str
    agent: str
    prompt: str
    shape: RunShape


def _completed(tool: str) -> RunShape:
    return RunShape(status=RunStatus.COMPLETED, tier="free", tool_turns=((tool,),))


# In the order they run in one session (a later run is sent the earlier answers).
KINDS = (
    # First, while nothing is remembered: forgetting fails.
    Kind("a tool fails", "assistant", "forget my shoe size", _completed("memory_forget")),
    Kind("calculates", "assistant", "calculate 2 * (3 + 4)", _completed("calculator")),
    Kind(
        "remembers",
        "assistant",
        "remember my favourite colour is green",
        _completed("memory_store"),
    ),
    Kind("tells the time", "assistant", "what time is it in Asia/Tokyo", _completed("clock_now")),
    Kind("repeats", "assistant", "echo hello there", _completed("echo")),
    Kind(
        "fails",
        "flaky",
        "calculate 6 * 7",
        RunShape(status=RunStatus.FAILED, tier="free", tool_turns=(("calculator",),)),
    ),
    Kind(
        "is stopped",
        "stopped",
        "echo hello there",
        RunShape(status=RunStatus.CANCELED, tier="free", tool_turns=(("echo",),)),
    ),
    # Last: a session's only waiting run is its last.
    Kind(
        "waits for approval",
        "assistant",
        "forget everything",
        RunShape(
            status=RunStatus.AWAITING_INPUT, tier="free", tool_turns=(("memory_forget_all",),)
        ),
    ),
)
# Payload values a caller chooses: their keys are the caller's, not the writer's.
FREE_FORM = frozenset({"labels", "metadata"})


def _paths(data: Any, prefix: str = "") -> set[str]:
    """The keys of a payload, nested ones as ``outer.inner``."""
    if not isinstance(data, dict):
        return set()
    paths = set()
    for key, value in data.items():
        paths.add(f"{prefix}{key}")
        if key not in FREE_FORM:
            paths |= _paths(value, f"{prefix}{key}.")
    return paths


def _message_shape(message: dict[str, Any]) -> tuple[Any, ...]:
    """A message's role and keys; a tool's answer with its keys, a model's request
    for tools with each call's."""
    shape: list[Any] = [message["role"], sorted(message)]
    if message["role"] == "tool":
        shape.append(sorted(_paths(json.loads(message["content"]))))
    shape.extend(sorted(call) for call in message.get("tool_calls", []))
    return tuple(map(str, shape))


@dataclass(frozen=True)
class Recorded:
    """What the test compares of a run."""

    # How it ended (and whether its error was worth retrying: the model was asked
    # again first), and how each of its tool calls did.
    outcome: tuple[str | bool, ...]
    types: list[str]
    keys: dict[str, set[str]]
    messages: list[list[tuple[Any, ...]]]


def _recorded(run: Run) -> Recorded:
    keys: dict[str, set[str]] = {}
    types = []
    for event in run.events.order_by("seq"):
        types.append(event.type)
        keys.setdefault(event.type, set()).update(_paths(event.data))
    calls = run.tool_calls.order_by("turn__index", "index").values_list("status", flat=True)
    return Recorded(
        outcome=(run.status, run.error_retryable, *calls),
        types=types,
        keys=keys,
        messages=[_request_shape(turn.request_messages) for turn in run.turns.order_by("index")],
    )


def _request_shape(messages: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """The run's own messages in full shape; the earlier runs before its question by
    role only (how their calls went is chance, in seeded runs as in real ones)."""
    question = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=0)
    return [
        (m["role"], bool(m.get("tool_calls"))) if i < question else _message_shape(m)
        for i, m in enumerate(messages)
    ]


def _session_keys(session_id: Any) -> dict[str, set[str]]:
    keys: dict[str, set[str]] = {}
    for event in RunEvent.objects.filter(session_id=session_id, run__isnull=True):
        keys.setdefault(event.type, set()).update(_paths(event.data))
    return keys


@pytest.mark.django_db(transaction=True)
def test_seeded_runs_are_recorded_as_the_runtime_records_real_ones(
    inline_runtime, owner, monkeypatch
):
    # The Stop button's request is seen at the next word, not half a second later.
    monkeypatch.setattr(loop, "CANCEL_CHECK_SECONDS", 0.0)
    rt.configure(agents=AgentRegistry([ASSISTANT, CONCIERGE, FLAKY, STOPPED]))
    session = rt.create_session(owner=owner, agent="assistant")
    real = {}
    for kind in KINDS:
        info = rt.run(kind.agent, kind.prompt, session=session.id, labels={"tier": "free"})
        assert info.status == kind.shape.status, kind.name
        real[kind.name] = _recorded(Run.objects.get(pk=info.id))
    rt.end_session(session.id)

    seeder = Seeder(
        Plan(
            sessions=0,
            runs_per_session=len(KINDS),
            turns_per_run=2,
            calls_per_turn=1,
            users=1,
            days=1.0,
            active_fraction=1.0,
            events=True,
            memory=True,
        ),
        seed=3,
    )
    # Seeded calls fail now and then, as real ones do: several sessions give each
    # kind's outcome at least once.
    shape = SessionShape(agent="assistant", active=True, runs=tuple(k.shape for k in KINDS))
    for _ in range(8):
        seeder.session(shape, owner_id=owner.pk)
    seeded: dict[str, list[Recorded]] = {kind.name: [] for kind in KINDS}
    for seeded_session in Session.objects.exclude(pk=session.id):
        runs = seeded_session.runs.order_by("created_at")
        for kind, run in zip(KINDS, runs, strict=True):
            seeded[kind.name].append(_recorded(run))

    for kind in KINDS:
        alike = [run for run in seeded[kind.name] if run.outcome == real[kind.name].outcome]
        assert alike, f"no seeded run {kind.name} as {real[kind.name].outcome}"
        for run in alike:
            assert run.types == real[kind.name].types, kind.name
            assert run.keys == real[kind.name].keys, kind.name
            assert run.messages == real[kind.name].messages, kind.name

    seeder.session(
        SessionShape(agent="assistant", active=False, runs=(KINDS[1].shape,)), owner_id=owner.pk
    )
    ended = Session.objects.filter(status=SessionStatus.ENDED).exclude(pk=session.id).get()
    assert _session_keys(ended.pk) == _session_keys(session.id)
