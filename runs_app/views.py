"""The web pages: the session list, a new chat, and the chat page of a session.

The pages are thin: they read what the first paint needs and hand the rest to the
page's JavaScript, which talks to the REST API and the session's WebSocket. Every
read is scoped to the caller: another user's session is a 404, as in the API,
unless the caller may read it and its event log (sessions_app.access).
"""

from __future__ import annotations

import datetime as dt
from typing import Any, cast
from uuid import UUID

from django.contrib.auth.decorators import login_required
from django.db.models import OuterRef, QuerySet, Subquery
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from goaai.access import allowed
from goaai.runtime import rt
from goaai.runtime.errors import NotFound, UnknownAgent
from goaai.runtime.vocabulary import OPEN_RUN_STATUSES, Multitask, RunStatus
from memory_app.models import MemoryEntry
from runs_app import selectors
from runs_app.models import Run
from runs_app.scores import feedback_by_run
from sessions_app.access import may_read_session
from sessions_app.models import Session
from sessions_app.services import MAX_TITLE_LENGTH, session_create

PAGE_SIZE = 30
SIDEBAR_SIZE = 25
# How a run's status reads in a badge (the page's script uses the same words).
RUN_STATUS_LABELS: dict[str, str] = {
    RunStatus.PENDING: "queued",
    RunStatus.RUNNING: "running",
    RunStatus.AWAITING_INPUT: "needs you",
    RunStatus.COMPLETED: "done",
    RunStatus.FAILED: "failed",
    RunStatus.CANCELED: "stopped",
    RunStatus.TIMED_OUT: "timed out",
}


def _own_sessions(user: Any, query: str = "") -> QuerySet[Session]:
    """The user's sessions, the most recently active first (the (owner,
    last_activity_at) index answers the order), each with its latest run's status
    (one query however many sessions there are: the status is a correlated subquery
    that the (session, created_at) index answers)."""
    latest_run = Run.objects.filter(session=OuterRef("pk"), parent_run__isnull=True).order_by(
        "-created_at"
    )
    sessions = Session.objects.filter(owner=user).annotate(
        latest_run_status=Subquery(latest_run.values("status")[:1]),
        latest_run_input=Subquery(latest_run.values("input")[:1]),
    )
    if query:
        sessions = sessions.filter(title__icontains=query)
    return sessions.order_by("-last_activity_at", "-created_at")


def _visible_session(user: Any, session_id: UUID) -> Session:
    """The session if the user may open it (their own, or another's with the
    permission to read it and its event log), else 404."""
    session = Session.objects.select_related("owner").filter(pk=session_id).first()
    if session is None or not may_read_session(user, session):
        raise Http404("No such session.")
    return session


def _groups(sessions: list[Session]) -> list[tuple[str, list[Session]]]:
    """Sessions grouped by when they were last active, in the viewer's day (the
    time zone activated for the request: sessions_app.timezones)."""
    today = timezone.localdate()
    labels = ("Today", "Yesterday", "Previous 7 days", "Older")
    grouped: dict[str, list[Session]] = {label: [] for label in labels}
    for session in sessions:
        status: str = getattr(session, "latest_run_status", None) or ""
        session.run_status_label = RUN_STATUS_LABELS.get(status, status)  # type: ignore[attr-defined]
        age = (today - timezone.localdate(session.last_activity_at)).days
        if age <= 0:
            label = labels[0]
        elif age == 1:
            label = labels[1]
        elif age <= 7:
            label = labels[2]
        else:
            label = labels[3]
        grouped[label].append(session)
    return [(label, items) for label, items in grouped.items() if items]


def _page_number(request: HttpRequest) -> int:
    try:
        # Bounded: a page past any real list is empty, not an OFFSET the database
        # cannot hold.
        return min(max(1, int(request.GET.get("page", "1"))), 100_000)
    except ValueError:
        return 1


@login_required
def session_list(request: HttpRequest) -> HttpResponse:
    """The user's sessions, the most recently active first, searchable by title and
    paged without a COUNT: a page reads one row more than it shows to know whether
    another follows."""
    # NUL cannot be stored or searched for in PostgreSQL text: it is dropped.
    query = request.GET.get("q", "").replace("\x00", "").strip()[:MAX_TITLE_LENGTH]
    page = _page_number(request)
    offset = (page - 1) * PAGE_SIZE
    rows = list(_own_sessions(request.user, query)[offset : offset + PAGE_SIZE + 1])
    has_next = len(rows) > PAGE_SIZE
    sessions = rows[:PAGE_SIZE]
    return render(
        request,
        "sessions/list.html",
        {
            "groups": _groups(sessions),
            "query": query,
            "page": page,
            "has_next": has_next,
            "has_previous": page > 1,
            "next_page": page + 1,
            "previous_page": page - 1,
            "list_data": {"live": page == 1 and not query, "query": query},
        },
    )


@login_required
@require_http_methods(["GET", "POST"])
def session_new(request: HttpRequest) -> HttpResponse:
    """Choose an agent (and a title) and start a conversation with it."""
    agents = rt.agents.all()
    chosen = request.POST.get("agent") or request.GET.get("agent") or "assistant"
    title = request.POST.get("title", "").replace("\x00", "").strip()
    error = ""
    if request.method == "POST":
        try:
            if chosen not in rt.agents:
                raise UnknownAgent(f"No agent named {chosen!r}.")
            session = session_create(
                # login_required: the user is signed in and has a primary key.
                owner_id=cast(int, request.user.pk),
                agent=chosen,
                title=title[:MAX_TITLE_LENGTH],
            )
        except (UnknownAgent, NotFound) as exc:
            error = str(exc)
        else:
            return redirect("sessions:chat", session_id=session.pk)
    if chosen not in rt.agents and agents:
        chosen = agents[0].id
    return render(
        request,
        "sessions/new.html",
        {
            "agents": agents,
            "chosen": chosen,
            "title": title,
            "error": error,
            "max_title_length": MAX_TITLE_LENGTH,
        },
        status=400 if error else 200,
    )


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value else None


def _viewer_may(user: Any, session: Session) -> dict[str, bool]:
    """What the viewer may do in the chat: everything in their own; in another
    user's, what their permissions allow (an auditor only reads)."""
    owner = session.owner_id
    return {
        "post": allowed(user, Run, "add", owner),
        "respond": allowed(user, Run, "respond", owner),
        "cancel": allowed(user, Run, "cancel", owner),
        "rename": allowed(user, Session, "change", owner),
        "end": allowed(user, Session, "end", owner),
        "delete": allowed(user, Session, "delete", owner),
        "memory": allowed(user, MemoryEntry, "change", owner),
        "forget": allowed(user, MemoryEntry, "delete", owner),
    }


@login_required
def session_chat(request: HttpRequest, session_id: UUID) -> HttpResponse:
    """The conversation. The transcript is rebuilt in the browser from the session's
    event log (the WebSocket sends it from ``after=0``); the page carries what the
    script needs to start: ids, URLs, the viewer, and the runs still in flight (so
    that a run whose worker died shows as interrupted until the engine takes it up)."""
    session = _visible_session(request.user, session_id)
    try:
        agent = rt.agents.get(session.agent)
        agent_description = agent.description
        multitask = str(agent.conversation.multitask)
        suggestions = list(agent.conversation.suggestions)
    except UnknownAgent:
        agent_description = "This agent is no longer configured."
        multitask = Multitask.ENQUEUE.value
        suggestions = []
    now = timezone.now()
    open_runs = [
        {
            "id": str(run_id),
            "status": status,
            # Held by a worker that is lost (told interrupted, or its lease ran
            # out); one released after an answer has no holder and is not.
            "interrupted": status == RunStatus.RUNNING
            and bool(lease_owner)
            and (lease_expires_at is None or lease_expires_at <= now),
        }
        for run_id, status, lease_owner, lease_expires_at in Run.objects.filter(
            session=session, status__in=OPEN_RUN_STATUSES
        ).values_list("id", "status", "lease_owner", "lease_expires_at")
    ]
    sidebar = list(_own_sessions(request.user)[:SIDEBAR_SIZE])
    may = _viewer_may(request.user, session)
    data = {
        "session": {
            "id": str(session.pk),
            "title": session.title,
            "agent": session.agent,
            "status": session.status,
            "owner": {"id": session.owner_id, "username": session.owner.username},
            "created_at": _iso(session.created_at),
            "ended_at": _iso(session.ended_at),
            "last_event_seq": session.last_event_seq,
            # What a message sent while a run is active does (the composer says so).
            "multitask": multitask,
        },
        "user": {"id": request.user.pk, "username": request.user.get_username()},
        "urls": {
            "api": "/api/v1/",
            "websocket": f"/ws/sessions/{session.pk}/",
            "export": f"/api/v1/sessions/{session.pk}/export/",
            "list": reverse("sessions:list"),
            "new": reverse("sessions:new"),
            "login": reverse("login"),
        },
        "open_runs": open_runs,
        "may": may,
        # The viewer's thumbs on the session's answers, by run (feedback.js).
        "feedback": feedback_by_run(session_id=session.pk, user_id=request.user.pk),
    }
    return render(
        request,
        "sessions/chat.html",
        {
            "session": session,
            "agent_description": agent_description,
            "suggestions": suggestions,
            "sidebar_groups": _groups(sidebar),
            "chat_data": data,
            "is_owner": session.owner_id == request.user.pk,
            "may": may,
            # A fork shows the conversation it continues (read-only, from the original).
            "fork": selectors.fork_origin(session_id=session.pk),
        },
    )
