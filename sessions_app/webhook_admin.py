"""Webhooks in the operators' console: endpoints (editable, through the services),
and the delivery log (read-only) with its attempts and a Redeliver action."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from goaai.access import CHANGE, allowed, log_actions
from goaai.admin_base import ReadOnlyAdmin, admin_fk_link, owner_filter
from goaai.runtime.vocabulary import WebhookEvent, choices
from sessions_app.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint
from sessions_app.webhooks import services


class WebhookEndpointForm(forms.ModelForm):  # type: ignore[type-arg]
    events = forms.MultipleChoiceField(
        choices=choices(WebhookEvent), widget=forms.CheckboxSelectMultiple
    )
    url = forms.CharField(max_length=2000, help_text="Public http(s) URLs only.")

    class Meta:
        model = WebhookEndpoint
        fields = ["owner", "url", "description", "events", "active"]

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean() or {}
        # The services' own checks (the URL's addresses, the events), as a form error.
        try:
            if "url" in cleaned and self.has_changed():
                services.webhook_url_check(cleaned["url"])
        except services.InvalidWebhook as exc:
            self.add_error("url", str(exc))
        return cleaned


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    form = WebhookEndpointForm
    list_display = ["url", "owner", "events", "active", "disabled_reason", "created_at"]
    list_filter = [owner_filter("owner"), "active"]
    search_fields = ["url", "description", "=owner__username"]
    list_select_related = ["owner"]
    ordering = ["-created_at"]
    readonly_fields = ["id", "secret_hint", "disabled_reason", "created_at", "updated_at"]
    raw_id_fields = ["owner"]

    @admin.display(description="secret")
    def secret_hint(self, endpoint: WebhookEndpoint) -> str:
        # The secret is the owner's to see (once); operators see which one it is.
        return f"{endpoint.secret[:10]}…" if endpoint.secret else ""

    def save_model(
        self, request: HttpRequest, obj: WebhookEndpoint, form: Any, change: bool
    ) -> None:
        data = form.cleaned_data
        if change:
            services.webhook_endpoint_update(
                endpoint_id=obj.pk,
                url=data["url"],
                events=data["events"],
                description=data["description"],
                active=data["active"],
            )
        else:
            created = services.webhook_endpoint_create(
                owner_id=data["owner"].pk,
                url=data["url"],
                events=data["events"],
                description=data["description"],
            )
            if not data["active"]:
                services.webhook_endpoint_update(endpoint_id=created.pk, active=False)
            obj.pk = created.pk
        obj.refresh_from_db()

    def delete_model(self, request: HttpRequest, obj: WebhookEndpoint) -> None:
        services.webhook_endpoint_delete(endpoint_id=obj.pk)


ATTEMPT_FIELDS = (
    "number",
    "started_at",
    "response_status",
    "latency_ms",
    "succeeded",
    "error",
    "response_excerpt",
    "manual",
)
DELIVERY_FIELDS = (
    "id",
    "endpoint",
    "event_type",
    "message_id",
    "status",
    "attempts",
    "next_attempt_at",
    "last_attempt_at",
    "last_response_status",
    "payload",
    "created_at",
)


class WebhookAttemptInline(admin.TabularInline):  # type: ignore[type-arg]
    model = WebhookAttempt
    fields = readonly_fields = ATTEMPT_FIELDS
    extra = 0
    can_delete = False
    ordering = ["number"]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ReadOnlyAdmin):
    list_display = [
        "message_id",
        "event_type",
        "endpoint_link",
        "status",
        "attempts",
        "last_response_status",
        "next_attempt_at",
        "created_at",
    ]
    list_filter = [owner_filter("endpoint__owner"), "status", "event_type"]
    search_fields = ["=message_id", "endpoint__url"]
    list_select_related = ["endpoint"]
    ordering = ["-created_at"]
    fields = readonly_fields = DELIVERY_FIELDS
    inlines = [WebhookAttemptInline]
    actions = ["redeliver"]

    @admin.display(description="endpoint")
    def endpoint_link(self, delivery: WebhookDelivery) -> str:
        return admin_fk_link(delivery, "endpoint", delivery.endpoint.url)

    def has_redeliver_permission(self, request: HttpRequest) -> bool:
        return allowed(request.user, WebhookEndpoint, "change", None)

    @admin.action(description="Redeliver selected messages", permissions=["redeliver"])
    def redeliver(self, request: HttpRequest, queryset: QuerySet[WebhookDelivery]) -> None:
        deliveries = list(queryset.select_related("endpoint"))
        for delivery in deliveries:
            services.webhook_delivery_redeliver(delivery_id=delivery.pk)
        log_actions(request.user, deliveries, CHANGE, "Redelivered (admin action)")
        self.message_user(
            request, f"Queued {len(deliveries)} message(s) to be sent again.", messages.SUCCESS
        )


@admin.register(WebhookAttempt)
class WebhookAttemptAdmin(ReadOnlyAdmin):
    list_display = [
        "delivery",
        "number",
        "started_at",
        "response_status",
        "latency_ms",
        "succeeded",
        "error",
    ]
    list_filter = ["succeeded"]
    search_fields = ["=delivery__message_id"]
    list_select_related = ["delivery"]
    ordering = ["-started_at"]
