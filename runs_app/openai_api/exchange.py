"""One request to ``/v1/`` as goaai records it: a new run in the session the
request continues, or the results of the caller's tools for the run that waits
for them. The same rules as the REST API: the caller's own sessions (or the
permission), its rate limits, ``Idempotency-Key`` replays.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone
from rest_framework.exceptions import APIException

from goaai.access import allowed
from goaai.runtime import rt
from goaai.runtime.errors import (
    DuplicateIdempotencyKey,
    IllegalTransition,
    InvalidAnswer,
    NotFound,
    RunActive,
    SessionEnded,
    UnknownAgent,
)
from goaai.runtime.types import Branch
from goaai.runtime.vocabulary import AwaitingKind, EventType, Multitask, RunStatus
from runs_app.api.throttles import RunStartThrottled, run_start_throttle
from runs_app.idempotency import (
    KEY_RULE,
    InvalidIdempotencyKey,
    idempotency_key_checked,
    request_fingerprint,
)
from runs_app.models import Run, ToolCall
from runs_app.openai_api import conversation
from runs_app.openai_api.conversation import Said
from runs_app.openai_api.errors import OpenAIError, conflict, invalid, not_found
from runs_app.selectors import session_head
from runs_app.services import run_record_conversation
from runs_app.tasks import QueueUnavailable
from sessions_app.access import sessions_readable
from sessions_app.models import RunEvent, Session

# A prefix some clients put before the model's name (LiteLLM-style routing).
MODEL_PREFIX = "goaai/"
CALL_PREFIX = "call_"
# Why a run that waited for the caller's tools was canceled.
TOOL_WAIT_EXPIRED = "The wait for the caller's tool results expired."
TOOL_WAIT_DROPPED = "A new message came to the session instead of the caller's tool results."


@dataclass(frozen=True)
class Ask:
    """A request to either API, in the terms goaai records it in."""

    endpoint: str  # "chat.completions" or "responses"
    model: str
    # The conversation as the client sent it (see runs_app.openai_api.conversation),
    # its new message last; empty when the request brings tool results.
    said: Sequence[Said]
    tool_outputs: dict[str, Any] = field(default_factory=dict)
    instructions: str = ""
    tools: Sequence[dict[str, Any]] = ()
    session: str | None = None
    previous_response: str | None = None
    # The body as sent, for telling an Idempotency-Key replay from a reuse.
    body: dict[str, Any] = field(default_factory=dict)
    idempotency_key: str | None = None
    # Whether the client says the request is its retry of one that failed (the
    # OpenAI SDKs count their attempts in X-Stainless-Retry-Count).
    retry: bool = False


@dataclass(frozen=True)
class Started:
    """The run a request is about, and where its part of the run begins."""

    run_id: UUID
    session_id: UUID
    model: str
    # The run's events after this sequence number are this exchange's.
    after_seq: int
    # Its turns from this index on.
    first_turn: int = 0


def agent_id(model: str) -> str:
    """The agent a ``model`` names (404 ``model_not_found`` if none)."""
    name = model.removeprefix(MODEL_PREFIX)
    try:
        rt.agents.get(name)
    except (UnknownAgent, NotFound, KeyError):
        raise not_found(
            f"The model {model!r} does not exist: models are goaai's agents (GET /v1/models).",
            code="model_not_found",
            param="model",
        ) from None
    return name


def idempotency_key(raw: str | None) -> str | None:
    try:
        return idempotency_key_checked(raw)
    except InvalidIdempotencyKey:
        raise invalid(f"Idempotency-Key: {KEY_RULE}.", param="Idempotency-Key") from None


def call_id(tool_call: UUID) -> str:
    """The id a client sees for a call of one of its tools."""
    return f"{CALL_PREFIX}{tool_call.hex}"


def _tool_call_uuid(raw: str, param: str) -> UUID:
    try:
        return UUID(raw.removeprefix(CALL_PREFIX))
    except ValueError:
        raise not_found(
            f"No tool call {raw!r} waits for a result.", code="tool_call_not_found", param=param
        ) from None


def begin(user: Any, token: Any, ask: Ask) -> Started:
    """Record the request: the caller's tool results, or a new run."""
    agent = agent_id(ask.model)
    expire_tool_waits(owner_id=user.pk)
    if ask.tool_outputs:
        return _answer_tools(user, agent, ask)
    fingerprint = request_fingerprint(ask.body)
    earlier = _earlier_attempt(user, ask, fingerprint)
    if earlier is not None:
        return earlier
    _check_message(ask)
    target = _target(user, agent, ask)
    _check_throttles(user, token)
    try:
        return _start(user, agent, ask, target, fingerprint)
    except DuplicateIdempotencyKey:
        # The key was used in the session by a run started another way.
        raise conflict(
            "This Idempotency-Key was used for a different request.", code="idempotency_key_reused"
        ) from None


def _check_message(ask: Ask) -> None:
    param = "messages" if ask.endpoint == "chat.completions" else "input"
    if not ask.said or ask.said[-1].role != "user":
        raise invalid(
            "The last message must be the user's (or the results of the calls of your "
            "tools that the run waits for).",
            param=param,
        )
    if not ask.said[-1].text:
        raise invalid("The user's message is empty.", param=param, code="empty_message")


def _earlier_attempt(user: Any, ask: Ask, fingerprint: str) -> Started | None:
    """The run an earlier attempt at this request started: the one its
    Idempotency-Key names or, for a client's retry without a key, the caller's
    latest run of the same request, started within the wait for a run (the retry of
    a request that failed or timed out follows the run it started)."""
    if ask.idempotency_key is not None:
        earlier = _run_for_key(user, ask.idempotency_key)
    elif ask.retry:
        since = timezone.now() - dt.timedelta(seconds=rt.config.run_wait_seconds)
        earlier = (
            Run.objects.filter(
                session__owner_id=user.pk,
                parent_run__isnull=True,
                metadata__via="openai",
                request_fingerprint=fingerprint,
                created_at__gte=since,
            )
            .order_by("-created_at")
            .first()
        )
    else:
        return None
    return _replay(earlier, fingerprint, ask.model) if earlier is not None else None


def expire_tool_waits(*, owner_id: int) -> int:
    """Cancel the runs of ``owner_id`` whose wait for the caller's tool results has
    lasted ``GOAAI_CLIENT_TOOL_WAIT_SECONDS`` (as OpenAI's requires_action expires),
    so that a client that dropped the calls leaves no run waiting for ever; the
    caller's next request does it. Returns how many."""
    cutoff = timezone.now() - dt.timedelta(seconds=settings.GOAAI_CLIENT_TOOL_WAIT_SECONDS)
    stale = Run.objects.filter(
        session__owner_id=owner_id,
        status=RunStatus.AWAITING_INPUT,
        awaiting__kind=AwaitingKind.CLIENT_TOOL,
        awaiting_since__lt=cutoff,
    ).values_list("pk", flat=True)
    expired = list(stale)
    for run_id in expired:
        _cancel_quietly(run_id, TOOL_WAIT_EXPIRED)
    return len(expired)


def _cancel_quietly(run_id: UUID, reason: str) -> None:
    # It may have moved on meanwhile: then nothing waits any more.
    with contextlib.suppress(IllegalTransition, NotFound):
        rt.cancel_run(run_id, reason=reason)


@dataclass(frozen=True)
class _Target:
    session: Session | None
    branch_from: UUID | None
    prelude: list[Said]


def _target(user: Any, agent: str, ask: Ask) -> _Target:
    """Where the new run goes: the session named, the response it follows, or the
    session whose recorded conversation the messages continue (else a new one)."""
    if ask.previous_response:
        previous = readable_run(user, ask.previous_response, param="previous_response_id")
        session = _writable_session(user, previous.session, agent)
        if ask.session and ask.session != str(session.pk):
            raise invalid(
                "previous_response_id belongs to another session than the one named.",
                param="previous_response_id",
            )
        head = session_head(session.pk)
        return _Target(session, None if head == previous.pk else previous.pk, [])
    if ask.session:
        return _Target(_named_session(user, ask.session, agent), None, [])
    earlier = list(ask.said[:-1])
    match = conversation.find(owner_id=user.pk, agent=agent, earlier=earlier)
    if match is None:
        return _Target(None, None, earlier)
    branch = match.branch_from.pk if match.branch_from is not None else None
    return _Target(match.run.session, branch, match.prelude)


def _named_session(user: Any, raw: str, agent: str) -> Session:
    try:
        session_id = UUID(raw.removeprefix("conv_"))
    except ValueError:
        raise not_found(f"No session {raw!r}.", code="session_not_found") from None
    session = sessions_readable(user).filter(pk=session_id).first()
    if session is None:
        raise not_found(f"No session {raw!r}.", code="session_not_found")
    return _writable_session(user, session, agent)


def _writable_session(user: Any, session: Session, agent: str) -> Session:
    # Reading someone's chat does not let one speak in it.
    if not allowed(user, Run, "add", session.owner_id):
        raise OpenAIError(
            403,
            f"You may not start runs in session {session.pk}, another user's.",
            code="permission_denied",
            type="permission_error",
        )
    if session.agent != agent:
        raise invalid(
            f"Session {session.pk} talks to the {session.agent!r} agent, not {agent!r}.",
            param="model",
            code="model_mismatch",
        )
    return session


def _response_uuid(raw: str) -> UUID | None:
    """The run a response id names (``resp_<hex>``, ``chatcmpl-<hex>`` or the run's id)."""
    try:
        return UUID(raw.removeprefix("resp_").removeprefix("chatcmpl-"))
    except ValueError:
        return None


def readable_run(user: Any, raw: str, *, param: str | None = None) -> Run:
    """A top-level run the caller may read, by its response id (404 otherwise)."""
    run_id = _response_uuid(raw)
    if run_id is None:
        raise not_found(f"No response {raw!r}.", param=param)
    run = (
        Run.objects.filter(pk=run_id, session__in=sessions_readable(user), parent_run__isnull=True)
        .select_related("session")
        .first()
    )
    if run is None:
        raise not_found(f"No response {raw!r}.", param=param)
    return run


def _check_throttles(user: Any, token: Any) -> None:
    """The REST API's limits on starting runs, counted in the same counters."""
    try:
        run_start_throttle(user=user, token=token)
    except RunStartThrottled as refused:
        raise OpenAIError(
            429,
            "Too many runs started: retry after the Retry-After seconds.",
            code="rate_limit_exceeded",
            type="rate_limit_error",
            retry_after=max(1, math.ceil(refused.wait or 1.0)),
        ) from None
    except APIException as exc:
        raise OpenAIError(
            503,
            "Runs cannot be started for a moment (the rate limit counters are unavailable).",
            code="rate_limits_unavailable",
            type="server_error",
            retry_after=5,
        ) from exc


def _start(user: Any, agent: str, ask: Ask, target: _Target, fingerprint: str) -> Started:
    said = list(ask.said)
    key = ask.idempotency_key
    instructions = "\n\n".join(
        part for part in (ask.instructions, conversation.transcript(target.prelude)) if part
    )
    try:
        with transaction.atomic():
            if key is not None:
                # Keys are the caller's: two first attempts at once, each about to
                # open a session of its own, take turns here (the database
                # enforces keys per session only).
                get_user_model().objects.select_for_update().filter(pk=user.pk).first()
                earlier = _run_for_key(user, key)
                if earlier is not None:
                    return _replay(earlier, fingerprint, ask.model)
            if target.session is not None:
                _drop_tool_wait(target.session.pk)
            session_id = (
                target.session.pk
                if target.session is not None
                else rt.create_session(owner=user, agent=agent, title=said[-1].text[:80]).id
            )
            handle = rt.start(
                agent,
                said[-1].text,
                session=session_id,
                metadata={"via": "openai", "endpoint": ask.endpoint},
                created_by=user,
                idempotency_key=key,
                fingerprint=fingerprint,
                branch=Branch(previous_run_id=target.branch_from) if target.branch_from else None,
                # A client waits for its answer: a session busy with another one
                # says so (409) rather than queueing the request behind it.
                multitask=Multitask.REJECT,
                client_tools=ask.tools,
                instructions=instructions,
            )
            run_record_conversation(run_id=handle.run_id, digest=conversation.digest(agent, said))
    except RunActive as exc:
        raise conflict(
            f"{exc} Wait for it to end, or send the results of your tools it waits for.",
            code="session_busy",
        ) from None
    except SessionEnded as exc:
        raise conflict(str(exc), code="session_ended") from None
    except QueueUnavailable as lost:
        raise OpenAIError(
            503,
            f"The run queue is unavailable for a moment; run {lost.run_id} is recorded and "
            "starts once it is back (a retry with the same Idempotency-Key returns it).",
            code="queue_unavailable",
            type="server_error",
            retry_after=5,
        ) from lost
    return Started(
        run_id=handle.run_id,
        session_id=session_id,
        model=ask.model,
        after_seq=_seq_before(handle.run_id, EventType.RUN_CREATED),
    )


def _drop_tool_wait(session_id: UUID) -> None:
    """A new message to a session whose run waits for the caller's tool results
    means the client dropped those calls: that run is canceled, and the message
    starts the next one (a run waiting for a person keeps the session busy)."""
    waiting = Run.objects.filter(
        session_id=session_id,
        parent_run__isnull=True,
        status=RunStatus.AWAITING_INPUT,
        awaiting__kind=AwaitingKind.CLIENT_TOOL,
    ).values_list("pk", flat=True)
    for run_id in list(waiting):
        _cancel_quietly(run_id, TOOL_WAIT_DROPPED)


def _seq_before(run_id: UUID, event_type: str) -> int:
    """The sequence number just before the run's latest event of ``event_type``."""
    seq = (
        RunEvent.objects.filter(run_id=run_id, type=event_type)
        .order_by("-seq")
        .values_list("seq", flat=True)
        .first()
    )
    return (seq or 1) - 1


def _run_for_key(user: Any, key: str) -> Run | None:
    # Per caller, not per session: the retry of a request that started a new
    # session would otherwise start another. Whichever way the run was started: a
    # key a REST or MCP run used is reused if sent here with another request.
    return (
        Run.objects.filter(session__owner_id=user.pk, idempotency_key=key)
        .order_by("-created_at")
        .first()
    )


def _replay(run: Run, fingerprint: str, model: str) -> Started:
    if run.request_fingerprint != fingerprint:
        raise conflict(
            "This Idempotency-Key was used for a different request.", code="idempotency_key_reused"
        )
    return Started(
        run_id=run.pk,
        session_id=run.session_id,
        model=model,
        after_seq=_seq_before(run.pk, EventType.RUN_CREATED),
    )


def _answer_tools(user: Any, agent: str, ask: Ask) -> Started:
    """Give the run that waits for the caller's tools their results."""
    ids = {_tool_call_uuid(raw, "tool_call_id"): raw for raw in ask.tool_outputs}
    run_ids = set(
        ToolCall.objects.filter(pk__in=list(ids), session__in=sessions_readable(user)).values_list(
            "run_id", flat=True
        )
    )
    if len(run_ids) != 1:
        unknown = ", ".join(sorted(ids.values()))
        message = f"No run waits for the results of {unknown}."
        if len(run_ids) > 1:
            message = "These tool results answer calls of different runs; send each run its own."
        raise not_found(message, code="tool_call_not_found")
    run = Run.objects.select_related("session").get(pk=run_ids.pop())
    if ask.previous_response and _response_uuid(ask.previous_response) != run.pk:
        raise invalid(
            "These tool results answer another response than previous_response_id.",
            param="previous_response_id",
        )
    if not allowed(user, Run, "respond", run.session.owner_id):
        raise OpenAIError(
            403,
            "You may not answer another user's run.",
            code="permission_denied",
            type="permission_error",
        )
    if run.agent != agent:
        raise invalid(f"That run is the {run.agent!r} agent's, not {agent!r}.", param="model")
    awaiting = run.awaiting or {}
    if run.status != RunStatus.AWAITING_INPUT or awaiting.get("kind") != AwaitingKind.CLIENT_TOOL:
        return _answered_before(run, ids, ask)
    waited = [UUID(str(c)) for c in awaiting.get("tool_calls") or [awaiting["tool_call"]]]
    missing = [call_id(c) for c in waited if c not in ids]
    if missing:
        raise invalid(
            f"Results are missing for {', '.join(missing)}: send the result of every call "
            "the run waits for.",
            param="tool_call_id",
            code="tool_results_missing",
        )
    first_turn = run.turns.count()
    after = _seq_before(run.pk, EventType.RUN_AWAITING_INPUT) + 1
    outputs = {call: _result(ask.tool_outputs[raw]) for call, raw in ids.items()}
    try:
        rt.submit_tool_outputs(run.pk, outputs, user=user)
    except InvalidAnswer as exc:
        raise invalid(str(exc), param="tool_call_id", code="invalid_tool_results") from None
    except IllegalTransition as exc:
        raise conflict(str(exc), code="not_awaiting_tool_results") from None
    return Started(
        run_id=run.pk,
        session_id=run.session_id,
        model=ask.model,
        after_seq=after,
        first_turn=first_turn,
    )


def _answered_before(run: Run, ids: dict[UUID, str], ask: Ask) -> Started:
    """The exchange these results continued, when they are the ones the run
    already has (a retry of the request that brought them); otherwise a 409."""
    if run.status == RunStatus.CANCELED and run.cancel_reason == TOOL_WAIT_EXPIRED:
        raise conflict(
            f"Run {run.pk} waited for these results longer than "
            f"{settings.GOAAI_CLIENT_TOOL_WAIT_SECONDS} s and was canceled; send the "
            "conversation again to start a new run.",
            code="tool_wait_expired",
        )
    calls = list(ToolCall.objects.filter(run=run, pk__in=list(ids)).select_related("turn"))
    same = len(calls) == len(ids) and all(
        call.result == _result(ask.tool_outputs[ids[call.pk]]) for call in calls
    )
    if not same:
        raise conflict(
            f"Run {run.pk} does not wait for tool results (it is {run.status}).",
            code="not_awaiting_tool_results",
        )
    return Started(
        run_id=run.pk,
        session_id=run.session_id,
        model=ask.model,
        after_seq=_seq_before(run.pk, EventType.RUN_AWAITING_INPUT) + 1,
        first_turn=max(call.turn.index for call in calls) + 1,
    )


def _result(output: Any) -> Any:
    """A tool's result as the caller sent it: its JSON if it is JSON, else its text."""
    if isinstance(output, str):
        try:
            parsed = json.loads(output)
        except ValueError:
            return output
        return parsed if isinstance(parsed, dict | list) else output
    return output
