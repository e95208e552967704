"""The live API against its own OpenAPI schema: a property-based run of schemathesis.

A real HTTP server (pytest-django's ``live_server``: a threaded WSGI server on
127.0.0.1 in front of the test database) serves ``/api/v1/``. Schemathesis loads the
schema the server publishes at ``/api/v1/schema/``, generates requests for every
operation in it, valid and invalid ones, sends them with a Bearer token of a user
who owns data, and checks every response: never a 5xx, a status code the schema
lists for the operation, the documented content type, headers and body.

Random ids would only ever meet 404s, so a hook swaps in, some of the time, the ids
of rows that exist (the caller's own and another user's), keys that are stored, an
``Idempotency-Key`` used twice, and prompts the scripted model acts on. Operations
that destroy or end a row get rows of their own, so the rest keep theirs.

Runs execute inline, in the server's request thread, with the offline scripted
model: no network. Generation is derandomized, so a failure reproduces; a failing
test lists every distinct failure of its operation, each with the curl command of
its first occurrence (the token left out).

Schemathesis drives generation and checking (``APIOperation.as_strategy``,
``Case.call``, ``Case.validate_response``) inside a Hypothesis test of our own,
one pytest test per operation and persona: its pytest entry point for a schema
that only a fixture can load (``schemathesis.pytest.from_fixture``) fails on
pytest 9.2, whose nodes have no ``_nodeid`` any more.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import hypothesis
import hypothesis.strategies as st
import pytest
import schemathesis
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.errors import FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from goaai.runtime import rt
from goaai.runtime.vocabulary import MemoryScope, RunStatus, ScoreKind, ScoreSource
from runs_app.models import Run, Score, ToolCall, Turn
from sessions_app.services import api_token_create
from sessions_app.webhooks.services import webhook_endpoint_create, webhook_ping

pytestmark = pytest.mark.django_db(transaction=True)

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
# Prompts the scripted model acts on: tools, a question, an approval, a child run.
PROMPTS = [
    "remember my favourite colour is green",
    "what is my favourite colour?",
    "calculate 2 * (3 + 4)",
    "what time is it in Europe/Rome?",
    "echo hello",
    "ask me for my name",
    "forget everything",
    "ask the assistant what is 6*7",
    "sloppy calculate 1+1",
]
KEYS = ["favourite colour", "name", "timezone"]
WEBHOOK_URL = "http://127.0.0.1:9/hook"
# Valid ISO 8601 instants at the edges: an offset PostgreSQL does not take (beyond
# ±15:59), and the first and last days Python can hold, which leave its range once
# converted to UTC.
INSTANTS = [
    "2024-06-01T12:00:00Z",
    "2024-06-01T12:00:00+16:00",
    "0001-01-01T00:00:00+05:00",
    "9999-12-31T23:00:00-05:00",
]


@dataclass
class World:
    """What the generated requests are steered to: ids of rows by what a request may
    do to them (``"session"`` to read, ``"session:delete"`` to delete), known keys,
    and whole request bodies that make sense for an operation."""

    pools: dict[str, list[Any]] = field(default_factory=dict)
    # Well-formed bodies by operation ("POST /memory/"), for requests that get past
    # validation to the code behind it.
    bodies: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def add(self, name: str, *values: Any) -> None:
        self.pools.setdefault(name, []).extend(str(v) if isinstance(v, UUID) else v for v in values)


def _seed(owner: Any, other: Any, staff: Any) -> World:
    """Alice's sessions with runs in every state, memory in every scope, Bob's rows,
    and an API token each (Charlie's too: tokens are personal, even for staff)."""
    world = World()
    kept = rt.create_session(owner=owner, title="kept", metadata={"project": "apollo"})
    second = rt.create_session(owner=owner, agent="concierge", title="second")
    doomed = rt.create_session(owner=owner, title="to delete")
    ending = rt.create_session(owner=owner, title="to end")
    bobs = rt.create_session(owner=other, title="Bob's")

    done = rt.run("assistant", PROMPTS[0], session=kept.id)
    rt.run("assistant", "calculate 2+3", session=kept.id)
    question = rt.run("assistant", "ask me for my name", session=kept.id)
    approval = rt.run("assistant", "forget everything", session=second.id)
    choices = rt.create_session(owner=owner, title="choices")
    choosing = rt.run(
        "assistant", "ask me to choose between tea, coffee or water", session=choices.id
    )
    to_cancel = rt.run("assistant", "ask me for my name", session=doomed.id)
    rt.run("assistant", "echo hi", session=ending.id)
    bobs_run = rt.run("assistant", "calculate 1+1", session=bobs.id)
    assert question.status == approval.status == RunStatus.AWAITING_INPUT
    assert done.status == RunStatus.COMPLETED
    waiting_call = ToolCall.objects.get(run_id=approval.id, requires_approval=True)

    user_entry = rt.store_memory("name", "Alice", scope=MemoryScope.USER, user=owner)
    spare_entry = rt.store_memory("timezone", "Europe/Rome", scope=MemoryScope.USER, user=owner)
    agent_entry = rt.store_memory("tone", "brief", scope=MemoryScope.AGENT, agent="assistant")
    global_entry = rt.store_memory("motto", "be kind", scope=MemoryScope.GLOBAL)
    session_entry = rt.get_memory("favourite colour", session=kept.id)
    bobs_entry = rt.store_memory("name", "Bob", scope=MemoryScope.USER, user=other)

    spare, _ = api_token_create(user_id=owner.pk, name="spare")
    bobs_token, _ = api_token_create(user_id=other.pk, name="bob's")
    staff_token, _ = api_token_create(user_id=staff.pk, name="spare")

    world.add("session", kept.id, second.id, bobs.id)
    world.add("session:delete", doomed.id, bobs.id)
    world.add("session:end", ending.id, bobs.id)
    world.add("run", *Run.objects.values_list("id", flat=True))
    world.add("run:cancel", to_cancel.id, done.id, bobs_run.id)
    # A run stopped before it answered, which a retry asks again.
    stopped = rt.start("assistant", "echo stopped", session=ending.id)
    Run.objects.filter(pk=stopped.run_id).update(status=RunStatus.CANCELED)
    world.add("run:retry", stopped.run_id, done.id, bobs_run.id)
    world.add("run:respond", question.id, approval.id, done.id, bobs_run.id, choosing.id)
    # DELETE /runs/{id}/feedback/ takes back feedback: the run stays.
    world.add("run:delete", done.id, stopped.run_id, bobs_run.id)
    # Scores: Alice's own on a run of hers that has ended, one on Bob's run.
    world.add("run:score", done.id, bobs_run.id)
    kept_score, spare_score, bobs_score = (
        Score.objects.create(
            run_id=run_id,
            name=name,
            kind=ScoreKind.NUMERIC,
            value=3.0,
            source=ScoreSource.API,
            author=author,
        )
        for run_id, name, author in (
            (done.id, "helpfulness", owner),
            (done.id, "accuracy", owner),
            (bobs_run.id, "helpfulness", other),
        )
    )
    world.add("score", kept_score.pk, bobs_score.pk)
    world.add("score:delete", spare_score.pk, bobs_score.pk)
    world.add("score_filter", "helpfulness", "helpfulness>=2", "tone=rude", "x>=y")
    world.add("turn", *Turn.objects.values_list("id", flat=True))
    world.add("tool_call", *ToolCall.objects.values_list("id", flat=True))
    world.add("tool_call:respond", waiting_call.id)
    world.add("memory", user_entry.id, agent_entry.id, global_entry.id, session_entry.id)
    world.add("memory", bobs_entry.id)
    world.add("memory:delete", spare_entry.id, agent_entry.id, bobs_entry.id)
    world.add("token", spare.pk, bobs_token.pk, staff_token.pk)
    world.add("token:delete", spare.pk, bobs_token.pk, staff_token.pk)
    hook, doomed_hook, bobs_hook = (
        webhook_endpoint_create(owner_id=user.pk, url=WEBHOOK_URL, events=["run.completed"])
        for user in (owner, owner, other)
    )
    world.add("webhook", hook.pk, bobs_hook.pk)
    world.add("webhook:delete", doomed_hook.pk, bobs_hook.pk)
    world.add("webhook_delivery", *(webhook_ping(endpoint_id=e.pk).pk for e in (hook, bobs_hook)))
    world.add("user", owner.pk, other.pk)
    world.add("key", *KEYS, "tone", "motto")
    world.add("agent", "assistant", "concierge")
    world.add("version", 1, 2)
    world.add("expires_at", None, "2999-01-01T00:00:00Z")
    world.add("instant", *INSTANTS)
    world.add("idempotency", "retry-1", "retry-2")
    world.add("input", *PROMPTS)
    world.bodies = {
        "POST /sessions/": [
            {"agent": "assistant"},
            {"agent": "concierge", "title": "trip", "metadata": {"project": "apollo"}},
        ],
        "PATCH /sessions/{id}/": [{"title": "renamed"}, {"metadata": {"project": "gemini"}}],
        "POST /sessions/{session_id}/runs/": [{"input": prompt} for prompt in PROMPTS]
        + [{"input": "echo hi", "labels": {"tier": "free"}, "metadata": {"ticket": 7}}],
        "POST /runs/{id}/edit/": [{"input": prompt} for prompt in PROMPTS],
        "POST /runs/{id}/respond/": [
            {"answer": "Ada"},
            {"choices": ["coffee"]},
            {"choices": ["tea", "water"]},
            {"tool_call": str(waiting_call.id), "decision": "approve"},
            {"tool_call": str(waiting_call.id), "decision": "deny", "reason": "not now"},
        ],
        "POST /memory/": [
            {
                "key": "favourite colour",
                "value": "blue",
                "scope": "session",
                "session": str(kept.id),
            },
            {
                "key": "city",
                "value": {"name": "Rome"},
                "scope": "session",
                "session": str(second.id),
            },
            {"key": "language", "value": "en", "scope": "user"},
            {"key": "tone", "value": "warm", "scope": "agent", "agent": "assistant"},
            {"key": "motto", "value": "be brief", "scope": "global"},
        ],
        "POST /webhooks/": [
            {"url": WEBHOOK_URL, "events": ["run.completed", "memory.changed"]},
            {"url": WEBHOOK_URL, "events": ["session.ended"], "description": "CRM"},
        ],
        "PATCH /webhooks/{id}/": [{"active": False}, {"events": ["run.failed"]}],
        "POST /runs/{id}/feedback/": [
            {"value": "up"},
            {"value": "down", "comment": "It named the wrong city."},
        ],
        "POST /runs/{id}/scores/": [
            {"name": "helpfulness", "value": 4},
            {"name": "tone", "category": "rude", "comment": "curt"},
            {"name": "grounded", "kind": "boolean", "value": True},
        ],
        "PATCH /runs/{id}/scores/{score_id}/": [
            {"value": 5},
            {"comment": "on reflection"},
            {"name": "tone", "kind": "category", "value": "warm"},
        ],
        "PATCH /me/preferences/": [
            {"time_zone": "Europe/Rome"},
            {"shortcuts_enabled": False},
            {"time_zone": "", "shortcuts_enabled": True},
        ],
        "PATCH /memory/{id}/": [
            {"value": "blue", "version": 1},
            {"value": ["a", 1], "version": 2},
            {"value": "later", "version": 1, "expires_at": "2999-01-01T00:00:00Z"},
        ],
    }
    return world


def _pool_for_path(world: World, method: str, path: str, name: str) -> list[Any]:
    """Which existing rows a path parameter may name for this operation."""
    if name == "session_id":
        return world.pools["session"]
    if name == "agent_id":
        return world.pools["agent"]
    if name == "score_id":
        return world.pools["score:delete" if method == "DELETE" else "score"]
    if "/scores/" in path:
        return world.pools["run:score"]
    collection = path.removeprefix("/api/v1/").split("/", 1)[0]
    kind = {
        "sessions": "session",
        "runs": "run",
        "turns": "turn",
        "tool-calls": "tool_call",
        "memory": "memory",
        "auth": "token",
        "webhooks": "webhook",
    }[collection]
    action = path.rstrip("/").rsplit("/", 1)[-1]
    if path.startswith("/api/v1/webhooks/deliveries/"):
        return world.pools["webhook_delivery"]
    if method == "DELETE":
        return world.pools[f"{kind}:delete"]
    if action in ("end", "cancel", "respond", "retry"):
        return world.pools[f"{kind}:{action}"]
    return world.pools[kind]


QUERY_POOLS = {
    "session": "session",
    "run": "run",
    "key": "key",
    "agent": "agent",
    "created_after": "instant",
    "created_before": "instant",
    "from": "instant",
    "to": "instant",
    "since": "instant",
    "until": "instant",
    "score": "score_filter",
}
BODY_POOLS = {
    "session": "session",
    "key": "key",
    "version": "version",
    "input": "input",
    "user": "user",
    "expires_at": "expires_at",
    "tool_call": "tool_call:respond",
}


def _maybe(pool: list[Any], current: Any) -> st.SearchStrategy[Any]:
    """Mostly a value from the pool; else the generated one."""
    known = st.sampled_from(pool)
    return st.one_of(known, known, known, st.just(current))


def steer(world: World) -> Callable[..., st.SearchStrategy[schemathesis.Case]]:
    """A ``flatmap_case`` hook sending most generated requests to what exists."""

    def flatmap_case(
        ctx: schemathesis.HookContext, case: schemathesis.Case
    ) -> st.SearchStrategy[schemathesis.Case]:
        draws = _draws(world, case)
        if not draws:
            return st.just(case)
        generated = case.body
        return st.fixed_dictionaries(draws).map(lambda values: _steered(case, generated, values))

    return flatmap_case


Draws = dict[tuple[str, str], st.SearchStrategy[Any]]


def _draws(world: World, case: schemathesis.Case) -> Draws:
    """What to draw for each part of the request: path, query, body, headers (in this
    order, which the derandomized generation depends on)."""
    method, path = case.method.upper(), case.path
    return {
        **_path_draws(world, case, method, path),
        **_query_draws(world, case, method),
        **_body_draws(world, case, method, path),
        **_header_draws(world, case, method, path),
    }


def _path_draws(world: World, case: schemathesis.Case, method: str, path: str) -> Draws:
    return {
        ("path", name): _maybe(_pool_for_path(world, method, path, name), value)
        for name, value in (case.path_parameters or {}).items()
    }


def _query_draws(world: World, case: schemathesis.Case, method: str) -> Draws:
    draws: Draws = {}
    for name, value in (case.query or {}).items():
        pool = "version" if (name, method) == ("version", "DELETE") else QUERY_POOLS.get(name)
        if pool:
            draws["query", name] = _maybe(world.pools[pool], value)
    return draws


def _body_draws(world: World, case: schemathesis.Case, method: str, path: str) -> Draws:
    draws: Draws = {}
    templates = world.bodies.get(f"{method} {path.removeprefix('/api/v1')}")
    if templates:
        # Half of the bodies well-formed, half generated (then partly steered).
        draws["body", "*"] = st.one_of(st.sampled_from(templates), st.just(case.body))
    if isinstance(case.body, dict):
        for name, value in case.body.items():
            if name in BODY_POOLS:
                draws["body", name] = _maybe(world.pools[BODY_POOLS[name]], value)
    return draws


def _header_draws(world: World, case: schemathesis.Case, method: str, path: str) -> Draws:
    action = path.rstrip("/").rsplit("/", 1)[-1]
    if method != "POST" or action != "runs":
        return {}
    current = (case.headers or {}).get("Idempotency-Key")
    return {("header", "Idempotency-Key"): _maybe(world.pools["idempotency"], current)}


def _steered(
    case: schemathesis.Case, generated: Any, values: dict[tuple[str, str], Any]
) -> schemathesis.Case:
    """``case`` with the drawn values put in their places; a drawn whole body replaces
    the generated one, whose fields are then left alone."""
    body = values.get(("body", "*"), generated)
    for (where, name), value in values.items():
        if where == "path":
            case.path_parameters = {**case.path_parameters, name: value}
        elif where == "query":
            case.query = {**case.query, name: value}
        elif where == "body" and name == "*":
            case.body = copy.deepcopy(body)
        elif where == "body":
            if body is generated:
                case.body = {**case.body, name: value}
        elif value is not None:
            case.headers = {**(case.headers or {}), name: value}
    return case


def _config() -> schemathesis.Config:
    """All of schemathesis' configuration (no schemathesis.toml): reports show every
    value sent but the token. Generation is set by the Hypothesis settings in
    :func:`_fuzz` (derandomized), the checks by ``CHECKS``."""
    return schemathesis.Config.from_dict(
        {
            "output": {
                "sanitization": {"keys-to-sanitize": ["authorization"], "sensitive-markers": []}
            },
        }
    )


def _load_schema(live_server: Any, user: Any, world: World) -> schemathesis.BaseSchema:
    """The schema as the live server publishes it, fuzzed as ``user`` with an API token."""
    _, raw = api_token_create(user_id=user.pk, name="schemathesis")
    auth = {"Authorization": f"Bearer {raw}"}
    schema = schemathesis.openapi.from_url(
        f"{live_server.url}/api/v1/schema/?format=json", config=_config(), headers=auth, timeout=30
    )
    schema.config.update(base_url=live_server.url, headers=auth)
    schema.hook(steer(world))
    return schema


@dataclass
class Fuzzed:
    """What one operation answered: how often each status, and the check failures."""

    statuses: Counter[int]
    failures: str

    @property
    def succeeded(self) -> int:
        return sum(n for status, n in self.statuses.items() if 200 <= status < 300)


def _fuzz(operation: schemathesis.APIOperation, max_examples: int) -> Fuzzed:
    """Send ``max_examples`` generated requests, valid and invalid, and check every
    response; collect each distinct check failure with a curl command that
    reproduces its first occurrence."""
    statuses: Counter[int] = Counter()
    seen: dict[tuple[str, int], tuple[int, str]] = {}
    strategy = st.one_of(
        operation.as_strategy(GenerationMode.POSITIVE),
        operation.as_strategy(GenerationMode.NEGATIVE),
    )

    @hypothesis.settings(
        max_examples=max_examples,
        derandomize=True,
        database=None,
        deadline=None,
        # Failures are collected, not raised: nothing to shrink.
        phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate],
        suppress_health_check=list(hypothesis.HealthCheck),
    )
    @hypothesis.given(case=strategy)
    def send(case: schemathesis.Case) -> None:
        response = case.call(timeout=30)
        statuses[response.status_code] += 1
        try:
            case.validate_response(response, checks=CHECKS)
        except FailureGroup as group:
            for failure in group.exceptions:
                key = (failure.title, response.status_code)
                count, message = seen.get(key, (0, group.message))
                seen[key] = (count + 1, message)

    send()
    failures = "\n".join(
        f"--- {title} (HTTP {status}, {count}x); first case:\n{message}"
        for (title, status), (count, message) in seen.items()
    )
    return Fuzzed(statuses, f"{operation.label}:\n{failures}" if failures else "")


def _operations() -> list[tuple[str, str]]:
    """Every operation the API documents, as (method, path): known when collecting,
    from the code the live server runs; each test takes its operation from the
    schema the server serves."""
    from drf_spectacular.generators import SchemaGenerator

    paths = SchemaGenerator().get_schema(request=None, public=True)["paths"]
    return [(method.upper(), path) for path, operations in paths.items() for method in operations]


OPERATIONS = _operations()
OPERATION_IDS = [f"{method} {path.removeprefix('/api/v1')}" for method, path in OPERATIONS]


@pytest.fixture
def world(transactional_db, inline_runtime, settings, owner, other_user, staff) -> World:
    # Generated POSTs start runs: let them, rather than answer 429 to all but the first.
    # Webhook endpoints on the loopback interface (nothing sends to them here).
    settings.GOAAI_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    settings.GOAAI_THROTTLE_RATES = {
        "run_create_user": "100000/min",
        "run_create_token": "100000/min",
    }
    return _seed(owner, other_user, staff)


@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=OPERATION_IDS)
def test_conforms_for_a_user_with_data(method, path, live_server, world, owner):
    schema = _load_schema(live_server, owner, world)

    fuzzed = _fuzz(schema[path][method], max_examples=25)

    assert not fuzzed.failures, fuzzed.failures
    if (method, path) in STAFF_ONLY:
        # Refused to her, every time, with the documented 403.
        assert set(fuzzed.statuses) <= {400, 403, 404}, dict(fuzzed.statuses)
        return
    # Steered to Alice's rows, some requests must get past validation and lookup.
    assert fuzzed.succeeded, f"no 2xx among {dict(fuzzed.statuses)}"


# Operations only staff with a permission may take: creating and changing agents.
STAFF_ONLY = {("POST", "/api/v1/agents/"), ("PATCH", "/api/v1/agents/{agent_id}/")}


@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=OPERATION_IDS)
def test_conforms_for_staff(method, path, live_server, world, staff):
    schema = _load_schema(live_server, staff, world)

    fuzzed = _fuzz(schema[path][method], max_examples=10)

    assert not fuzzed.failures, fuzzed.failures
