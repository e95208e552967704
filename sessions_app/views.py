"""The user's settings pages.

The settings page (/settings/) is a plain form page: preferences saved by POST,
API tokens created (the token shown once, in the answer to the POST that made it)
and revoked. The webhooks page is a shell; its script lists, adds and removes the
user's endpoints through the REST API (/api/v1/webhooks/).
"""

from __future__ import annotations

from typing import Any, cast
from uuid import UUID

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from goaai.runtime.vocabulary import WebhookEvent
from sessions_app import services
from sessions_app.forms import PreferencesForm, TokenForm
from sessions_app.models import ApiToken
from sessions_app.selectors import user_preferences

# What each event means, in the words the page shows next to its checkbox.
EVENT_HELP = {
    WebhookEvent.RUN_COMPLETED: "A run answered.",
    WebhookEvent.RUN_FAILED: "A run failed or ran out of time.",
    WebhookEvent.RUN_AWAITING_INPUT: "A run waits for an approval or an answer.",
    WebhookEvent.SESSION_ENDED: "A chat was ended.",
    WebhookEvent.MEMORY_CHANGED: "A memory entry was stored, changed or deleted.",
}


@login_required
def webhook_settings(request: HttpRequest) -> HttpResponse:
    events = [{"value": str(event), "help": EVENT_HELP[event]} for event in WebhookEvent]
    return render(
        request,
        "settings/webhooks.html",
        {"events": events, "page_data": {"api": "/api/v1/webhooks/"}},
    )


def _settings_page(
    request: HttpRequest,
    *,
    preferences_form: PreferencesForm | None = None,
    token_form: TokenForm | None = None,
    created: tuple[ApiToken, str] | None = None,
    status: int = 200,
) -> HttpResponse:
    saved = user_preferences(request.user)
    now = timezone.now()
    tokens = list(
        ApiToken.objects.filter(user_id=cast(int, request.user.pk), revoked_at__isnull=True)
    )
    for token in tokens:
        token.expired = token.expires_at is not None and token.expires_at <= now  # type: ignore[attr-defined]
    response = render(
        request,
        "settings/index.html",
        {
            "preferences_form": preferences_form
            or PreferencesForm(
                initial={
                    "time_zone": saved.time_zone,
                    "shortcuts_enabled": saved.shortcuts_enabled,
                }
            ),
            "token_form": token_form or TokenForm(),
            "tokens": tokens,
            "created_token": created[0] if created else None,
            "created_value": created[1] if created else "",
            "saved_time_zone": saved.time_zone,
        },
        status=status,
    )
    # A page that shows a token, or may, is never kept by a cache or the history.
    response["Cache-Control"] = "no-store"
    return response


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def user_settings(request: HttpRequest) -> HttpResponse:
    """The settings page; a POST saves the preferences form."""
    if request.method != "POST":
        return _settings_page(request)
    form = PreferencesForm(request.POST)
    if not form.is_valid():
        return _settings_page(request, preferences_form=form, status=400)
    services.user_preferences_update(
        user_id=cast(int, request.user.pk),
        time_zone=form.cleaned_data["time_zone"],
        shortcuts_enabled=form.cleaned_data["shortcuts_enabled"],
    )
    messages.success(request, "Your preferences are saved.")
    return redirect("user-settings")


@login_required
@require_POST
def token_create(request: HttpRequest) -> HttpResponse:
    """Make an API token; the answer shows it, this once (it is not stored)."""
    form = TokenForm(request.POST)
    if not form.is_valid():
        return _settings_page(request, token_form=form, status=400)
    token, raw = services.api_token_create(
        user_id=cast(int, request.user.pk),
        name=form.cleaned_data["name"],
        expires_at=form.expires_at(timezone.now()),
    )
    return _settings_page(request, created=(token, raw), status=201)


@login_required
@require_POST
def token_revoke(request: HttpRequest, token_id: UUID) -> HttpResponse:
    """Revoke one of the user's tokens (and every token made with it)."""
    token: Any = ApiToken.objects.filter(
        pk=token_id, user_id=cast(int, request.user.pk), revoked_at__isnull=True
    ).first()
    if token is None:
        raise Http404("No such token.")
    services.api_token_revoke(token_id=token.pk)
    messages.success(request, f"Revoked “{token.name}”: it no longer works.")
    return redirect("user-settings")
