"""The operators' dashboard page: every figure for a time range and filters, each a
link to the list it sums.

Mounted by ``RunAdmin.get_urls`` inside ``admin.site.admin_view`` (active staff,
else the login page). It shows every user's runs added up, so it takes the
permission to read every user's runs (``runs_app.view_run``); the failing tools
take ``runs_app.view_toolcall`` too, the scores ``runs_app.view_score``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone
from django.views.decorators.http import require_GET

from goaai.access import has_permission
from runs_app.dashboard.charts import runs_chart
from runs_app.dashboard.figures import figures, scored
from runs_app.dashboard.scope import Scope, ScopeForm
from runs_app.models import Run, Score, ToolCall


def _label_of(scope: Scope) -> Callable[[dt.datetime], str]:
    zone = timezone.get_current_timezone()

    def label(moment: dt.datetime) -> str:
        if scope.hourly:
            return moment.astimezone(zone).strftime("%H:%M")
        return moment.strftime("%b %d")

    return label


@require_GET
def dashboard(request: HttpRequest) -> HttpResponse:
    user = request.user
    if not (user.is_active and user.is_staff and has_permission(user, Run, "view")):
        raise PermissionDenied("The dashboard adds up every user's runs: it takes view_run.")
    form = ScopeForm(request.GET or None)
    context: dict[str, Any] = {
        **admin.site.each_context(request),
        "title": "Dashboard",
        "form": form,
    }
    if form.is_bound and not form.is_valid():
        return TemplateResponse(request, "admin/runs_app/dashboard.html", context, status=400)
    if not form.is_bound:
        form = ScopeForm({})
        form.is_valid()
    scope = form.scope()
    found = figures(scope, with_tools=has_permission(user, ToolCall, "view"))
    with_scores = has_permission(user, Score, "view")
    context.update(
        form=form,
        scope=scope,
        figures=found,
        chart=runs_chart(found.bars, _label_of(scope)),
        groupings=[("agent", found.by_agent), ("model", found.by_model), ("user", found.by_user)],
        with_scores=with_scores,
        scores=scored(scope) if with_scores else [],
    )
    return TemplateResponse(request, "admin/runs_app/dashboard.html", context)
