"""The run and session timelines of the admin, their payload endpoint, the run's JSON
download and the operator's Cancel.

These views are mounted by ``RunAdmin.get_urls`` / ``SessionAdmin.get_urls`` inside
``admin.site.admin_view``, which sends anyone who is not active staff to the login
page and protects the POST with CSRF. Each view checks ``is_staff`` again anyway:
a view that shows other users' conversations must not rely on being wired right.
Being staff shows nothing by itself: a timeline shows a whole record, so another
user's takes the permission to read each of its parts (see runs_app.access), and
one the viewer may not read is "not found"; Cancel takes ``runs_app.cancel_run``.
A run's timeline lists its scores; adding one takes ``runs_app.add_score``, and a
staff or API score is its author's to change or delete (anyone's, with
``runs_app.change_score`` or ``runs_app.delete_score``). Each of those is logged.
"""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.core.serializers.json import DjangoJSONEncoder
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseRedirect,
    JsonResponse,
    StreamingHttpResponse,
)
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from goaai.access import ADDITION, CHANGE, DELETION, has_permission, log_actions
from goaai.runtime import rt
from goaai.runtime.errors import GoaaiError
from goaai.runtime.vocabulary import ScoreSource
from runs_app import access, scores
from runs_app.api.serializers import (
    RunEventSerializer,
    RunSerializer,
    ToolCallSerializer,
    TurnSerializer,
)
from runs_app.export import run_document_stream
from runs_app.models import Run, Score, ToolCall, Turn
from runs_app.timeline.filters import VIEWS, TimelineFilter, event_type_choices
from runs_app.timeline.headers import (
    run_for_timeline,
    run_header,
    session_for_timeline,
    session_header,
)
from runs_app.timeline.pages import PAGE_SIZE, event_page
from runs_app.timeline.scores import ScoreForm, add_form, edit_form, score_panel
from runs_app.timeline.values import DISPLAY_CAP
from sessions_app.models import RunEvent, Session

_CHUNK = 500


def _require_staff(request: HttpRequest) -> None:
    user = request.user
    if not (user.is_authenticated and user.is_active and user.is_staff):
        raise PermissionDenied


def _dumps(value: Any, *, indent: int | None = None) -> str:
    return json.dumps(value, cls=DjangoJSONEncoder, ensure_ascii=False, indent=indent)


def _page_context(request: HttpRequest, filters: TimelineFilter) -> dict[str, Any]:
    return {
        **admin.site.each_context(request),
        "filters": filters,
        "type_choices": event_type_choices(),
        "views": [(name, filters.query_string(view=name), name == filters.view) for name in VIEWS],
        "order_links": {
            "oldest": filters.query_string(newest_first=False),
            "newest": filters.query_string(newest_first=True),
        },
        "failed_link": filters.query_string(failed_only=True),
        "page_size": PAGE_SIZE,
        "display_cap": DISPLAY_CAP,
    }


def _readable_run(request: HttpRequest, run_id: UUID) -> Run:
    _require_staff(request)
    run = run_for_timeline(run_id)
    if run is None or not access.can_read_run_record(request.user, run):
        raise Http404("No such run.")
    return run


@require_http_methods(["GET", "POST"])
def run_timeline(request: HttpRequest, run_id: UUID) -> HttpResponse:
    """Every event of a run in order, a page at a time, with what each refers to.
    A POST is one of its Scores panel's forms: a form refused is shown again at the
    same address, every link of the page still its own."""
    run = _readable_run(request, run_id)
    if request.method == "POST":
        return _score_post(request, run)
    return _run_timeline_page(request, run, score_panel(request.user, run))


def _run_timeline_page(
    request: HttpRequest, run: Run, scores_panel: dict[str, Any], status: int = 200
) -> HttpResponse:
    filters = TimelineFilter.from_query(request.GET)
    header = run_header(run)
    base_url = reverse("admin:runs_app_run_timeline", args=[run.id])
    page = event_page(
        run=run,
        filters=filters,
        origin=header.origin,
        base_url=base_url,
        known_users=header.users,
    )
    context = {
        **_page_context(request, filters),
        "title": f"Timeline of run {run.id}",
        "subtitle": None,
        "opts": Run._meta,
        "run": run,
        "header": header,
        "page": page,
        "base_url": base_url,
        "download_url": reverse("admin:runs_app_run_timeline_download", args=[run.id]),
        "cancel_url": reverse("admin:runs_app_run_timeline_cancel", args=[run.id]),
        "may_cancel": access.can(request.user, "cancel", run),
        "session_timeline_url": reverse(
            "admin:sessions_app_session_timeline", args=[run.session_id]
        ),
        "scores": scores_panel,
    }
    return TemplateResponse(request, "admin/runs_app/run/timeline.html", context, status=status)


@require_GET
def session_timeline(request: HttpRequest, session_id: UUID) -> HttpResponse:
    """Every event of a session, all its runs interleaved by ``seq``."""
    _require_staff(request)
    session = session_for_timeline(session_id)
    if session is None or not access.can_read_session_record(request.user, session):
        raise Http404("No such session.")
    filters = TimelineFilter.from_query(request.GET)
    header = session_header(session)
    base_url = reverse("admin:sessions_app_session_timeline", args=[session.id])
    page = event_page(
        session=session,
        filters=filters,
        origin=session.created_at,
        base_url=base_url,
        run_labels=header.run_labels,
        known_users=header.users,
    )
    export_url = ""
    try:
        # The API's export: one document with the session, runs, turns, tool calls,
        # events and session memory (it asks for the same permissions).
        if access.can_read_session_record(request.user, session, with_memory=True):
            export_url = reverse("api:session-export", args=[session.id])
    except NoReverseMatch:
        pass
    context = {
        **_page_context(request, filters),
        "title": f"Timeline of session {session.id}",
        "subtitle": None,
        "opts": Session._meta,
        "session_obj": session,
        "header": header,
        "page": page,
        "base_url": base_url,
        "export_url": export_url,
    }
    return TemplateResponse(request, "admin/sessions_app/session/timeline.html", context)


# Lazily loaded values

_PAYLOAD_FIELDS: dict[str, frozenset[str]] = {
    "event": frozenset({"data"}),
    "turn": frozenset({"request_messages", "response", "reasoning", "usage"}),
    "tool_call": frozenset({"arguments", "result", "error"}),
    "run": frozenset({"input", "output", "labels", "metadata", "policy", "error", "awaiting"}),
}


def _payload_row(kind: str, object_id: str) -> Any:
    try:
        if kind == "event":
            return get_object_or_404(RunEvent, pk=int(object_id))
        if kind == "turn":
            return get_object_or_404(Turn.objects.select_related("run"), pk=UUID(object_id))
        if kind == "tool_call":
            return get_object_or_404(ToolCall, pk=UUID(object_id))
        if kind == "run":
            return get_object_or_404(Run, pk=UUID(object_id))
    except ValueError:
        raise Http404("Malformed id.") from None
    raise Http404("Unknown kind.")


_PAYLOAD_SERIALIZERS: dict[str, Any] = {
    "event": RunEventSerializer,
    "turn": TurnSerializer,
    "tool_call": ToolCallSerializer,
    "run": RunSerializer,
}


def _payload_document(request: HttpRequest, kind: str, object_id: str) -> dict[str, Any]:
    row = _payload_row(kind, object_id)
    if not access.can_read_row(request.user, row):
        raise Http404("Not found.")
    return dict(_PAYLOAD_SERIALIZERS[kind](row).data)


@require_GET
def timeline_payload(request: HttpRequest, kind: str, object_id: str | int | UUID) -> HttpResponse:
    """The whole of a value the timeline cut or did not load: an event, a turn (its
    messages) or a tool call, as the API shows it; ``?field=`` picks one field and
    ``?download=1`` makes it an attachment."""
    _require_staff(request)
    if kind not in _PAYLOAD_FIELDS:
        raise Http404("Unknown kind.")
    document = _payload_document(request, kind, str(object_id))
    field_name = request.GET.get("field", "")
    value: Any = document
    if field_name:
        if field_name not in _PAYLOAD_FIELDS[kind]:
            raise Http404("Unknown field.")
        value = document.get(field_name)
    response = JsonResponse(
        value,
        safe=False,
        encoder=DjangoJSONEncoder,
        json_dumps_params={"ensure_ascii": False, "indent": 2},
    )
    if request.GET.get("download") == "1":
        name = f"{kind}-{object_id}{'-' + field_name if field_name else ''}.json"
        response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


# The whole run as one JSON document


@require_GET
def run_download(request: HttpRequest, run_id: UUID) -> StreamingHttpResponse:
    """The run as one JSON document, as an attachment."""
    _require_staff(request)
    run = get_object_or_404(Run, pk=run_id)
    if not access.can_read_run_record(request.user, run):
        raise Http404("No such run.")
    response = StreamingHttpResponse(run_document_stream(run), content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="run-{run.id}.json"'
    return response


# The operator's Cancel


@require_POST
def run_cancel(request: HttpRequest, run_id: UUID) -> HttpResponse:
    """Ask a run to stop, from its timeline (a POST, CSRF-protected by admin_view)."""
    _require_staff(request)
    run = get_object_or_404(Run.objects.only("id", "status", "session_id"), pk=run_id)
    if not access.can_read_run_record(request.user, run):
        raise Http404("No such run.")
    if not access.can(request.user, "cancel", run):
        raise PermissionDenied
    target = reverse("admin:runs_app_run_timeline", args=[run.id])
    if run.is_terminal:
        messages.warning(request, f"The run had already ended ({run.status}); nothing to cancel.")
        return HttpResponseRedirect(target)
    try:
        info = rt.cancel_run(run.id, reason=access.canceled_by(request.user), by=request.user)
    except GoaaiError as exc:
        messages.error(request, f"The run could not be canceled: {exc}")
        return HttpResponseRedirect(target)
    log_actions(request.user, [run], CHANGE, "Canceled (from its timeline)")
    if info.status == "canceled":
        messages.success(request, "The run was canceled.")
    else:
        messages.info(request, "Cancel requested: the run stops at its next step.")
    return HttpResponseRedirect(target)


# Scores from the timeline


def _scores_anchor(run: Run) -> str:
    return reverse("admin:runs_app_run_timeline", args=[run.pk]) + "#tl-scores"


def _refused(request: HttpRequest, run: Run, **forms: ScoreForm) -> HttpResponse:
    """The timeline again, with the form sent back and what was wrong in it."""
    messages.error(request, "The score was not saved: see what is wrong below.")
    return _run_timeline_page(request, run, score_panel(request.user, run, **forms), status=400)


def _score_add(request: HttpRequest, run: Run) -> HttpResponse:
    """Add a staff score to a run that has ended (``runs_app.add_score``)."""
    if not has_permission(request.user, Score, "add"):
        raise PermissionDenied
    form = add_form(request.POST)
    if not form.is_valid():
        return _refused(request, run, adding=form)
    try:
        score = scores.score_add(
            run_id=run.pk, author_id=request.user.pk, source=ScoreSource.STAFF, entry=form.entry
        )
    except scores.RunNotEnded as exc:
        messages.error(request, str(exc))
        return HttpResponseRedirect(_scores_anchor(run))
    shown = f"{score.name} = {scores.score_shown(score)}"
    log_actions(
        request.user, [score], ADDITION, f"Scored run {run.pk}: {shown} (from its timeline)"
    )
    messages.success(request, f"Score {shown} added.")
    return HttpResponseRedirect(_scores_anchor(run))


def _score_of(request: HttpRequest, run: Run, action: str) -> Score:
    """The score of ``run`` the form names, if ``action`` on it is the viewer's."""
    try:
        score_id = UUID(request.POST.get("score_id", ""))
    except ValueError:
        raise Http404("No such score.") from None
    score = get_object_or_404(Score.objects.select_related("author"), pk=score_id, run_id=run.pk)
    if not access.may_edit_score(request.user, score, action):
        raise PermissionDenied
    return score


def _score_change(request: HttpRequest, run: Run) -> HttpResponse:
    """Change a staff or API score: its author's, or anyone's with
    ``runs_app.change_score``."""
    score = _score_of(request, run, "change")
    before = f"{score.name} = {scores.score_shown(score)}"
    form = edit_form(score, request.POST)
    if not form.is_valid():
        return _refused(request, run, editing=form)
    entry = form.entry
    try:
        changed = scores.score_change(
            score_id=score.pk, name=entry.name, score=entry.score, comment=entry.comment
        )
    except GoaaiError as exc:  # deleted meanwhile
        messages.error(request, f"The score was not changed: {exc}")
        return HttpResponseRedirect(_scores_anchor(run))
    after = f"{changed.name} = {scores.score_shown(changed)}"
    log_actions(
        request.user,
        [changed],
        CHANGE,
        f"Changed score {before} to {after} on run {run.pk} (from its timeline)",
    )
    messages.success(request, f"Score changed to {after}.")
    return HttpResponseRedirect(_scores_anchor(run))


def _score_delete(request: HttpRequest, run: Run) -> HttpResponse:
    """Delete a staff or API score: its author's, or anyone's with
    ``runs_app.delete_score``."""
    score = _score_of(request, run, "delete")
    shown = f"{score.name} = {scores.score_shown(score)}"
    # Logged first: the log names the score as it was.
    log_actions(
        request.user,
        [score],
        DELETION,
        f"Deleted score {shown} of run {run.pk} (from its timeline)",
    )
    scores.score_delete(score_id=score.pk)
    messages.success(request, f"Score {shown} deleted.")
    return HttpResponseRedirect(_scores_anchor(run))


_SCORE_ACTIONS = {"add": _score_add, "change": _score_change, "delete": _score_delete}


def _score_post(request: HttpRequest, run: Run) -> HttpResponse:
    """One of the Scores panel's forms, by its ``score_action`` (a POST through
    admin_view, CSRF-protected)."""
    action = _SCORE_ACTIONS.get(request.POST.get("score_action", ""))
    if action is None:
        return HttpResponseBadRequest("Unknown score action: expected add, change or delete.")
    return action(request, run)
