"""The webhooks settings page: the page itself is a shell; its script lists, adds
and removes the user's endpoints through the REST API (/api/v1/webhooks/)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from goaai.runtime.vocabulary import WebhookEvent

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
