"""Webhook endpoints, their deliveries and each delivery's attempts."""

from __future__ import annotations

from typing import Any

from django.db.models import Prefetch, QuerySet
from drf_spectacular.utils import OpenApiExample, extend_schema, extend_schema_view
from drf_standardized_errors.openapi_validation_errors import extend_validation_errors
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from goaai.access import CHANGE, DELETION
from goaai.api.pagination import Cursor
from goaai.api.views import ScopedViewSet
from goaai.runtime.vocabulary import WebhookDeliveryStatus, WebhookEvent, choices
from sessions_app.api.serializers import OwnerSerializer
from sessions_app.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint
from sessions_app.webhooks import services
from sessions_app.webhooks.addresses import MAX_URL_LENGTH

EVENT_CHOICES = choices(WebhookEvent)


class WebhookEndpointSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    owner = OwnerSerializer(read_only=True)
    events = serializers.ListField(child=serializers.ChoiceField(choices=EVENT_CHOICES))
    disabled_reason = serializers.CharField(
        help_text="Why goaai turned the endpoint off (it answered 410 Gone); empty otherwise."
    )

    class Meta:
        model = WebhookEndpoint
        fields = [
            "id",
            "url",
            "description",
            "events",
            "active",
            "disabled_reason",
            "owner",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class WebhookEndpointWithSecretSerializer(WebhookEndpointSerializer):
    secret = serializers.CharField(
        help_text="The signing secret (`whsec_...`). Shown only when the endpoint is "
        "created and when its secret is rotated."
    )

    class Meta(WebhookEndpointSerializer.Meta):
        fields = [*WebhookEndpointSerializer.Meta.fields, "secret"]
        read_only_fields = fields


class WebhookEndpointCreateSerializer(serializers.Serializer):  # type: ignore[type-arg]
    url = serializers.CharField(
        max_length=MAX_URL_LENGTH,
        help_text="An http(s) URL whose host resolves to public addresses only "
        "(operators may allow others with GOAAI_WEBHOOK_ALLOWED_NETWORKS).",
    )
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=EVENT_CHOICES), min_length=1, max_length=10
    )
    description = serializers.CharField(
        max_length=200, required=False, allow_blank=True, default=""
    )


class WebhookEndpointUpdateSerializer(serializers.Serializer):  # type: ignore[type-arg]
    url = serializers.CharField(max_length=MAX_URL_LENGTH, required=False)
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=EVENT_CHOICES),
        min_length=1,
        max_length=10,
        required=False,
    )
    description = serializers.CharField(max_length=200, required=False, allow_blank=True)
    active = serializers.BooleanField(required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if not attrs:
            raise ValidationError("Send at least one field to change.", code="empty")
        return attrs


class WebhookAttemptSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    class Meta:
        model = WebhookAttempt
        fields = [
            "number",
            "started_at",
            "response_status",
            "latency_ms",
            "succeeded",
            "error",
            "response_excerpt",
            "manual",
        ]
        read_only_fields = fields


class WebhookDeliverySerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    status = serializers.ChoiceField(choices=choices(WebhookDeliveryStatus))
    attempt_count = serializers.IntegerField(source="attempts")
    attempts = WebhookAttemptSerializer(source="attempt_log", many=True)

    class Meta:
        model = WebhookDelivery
        fields = [
            "id",
            "endpoint",
            "event_type",
            "message_id",
            "status",
            "attempt_count",
            "next_attempt_at",
            "last_attempt_at",
            "last_response_status",
            "payload",
            "attempts",
            "created_at",
        ]
        read_only_fields = fields


def _invalid(exc: services.InvalidWebhook) -> ValidationError:
    return ValidationError({exc.field: [str(exc)]}, code=exc.code)


def _deliveries() -> QuerySet[WebhookDelivery]:
    return WebhookDelivery.objects.prefetch_related(
        Prefetch("attempt_log", queryset=WebhookAttempt.objects.order_by("number"))
    )


@extend_validation_errors(["refused_url"], field_name="url", actions=["create", "partial_update"])
@extend_validation_errors(["too_many"], field_name="non_field_errors", actions=["create"])
@extend_validation_errors(["empty"], field_name="non_field_errors", actions=["partial_update"])
@extend_schema_view(
    list=extend_schema(summary="List webhook endpoints", description="Yours, newest first."),
    retrieve=extend_schema(summary="Get a webhook endpoint"),
)
class WebhookEndpointViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ScopedViewSet):
    owner_lookup = "owner"
    serializer_class = WebhookEndpointSerializer
    pagination_class = Cursor
    filterset_class = None
    lookup_value_regex = "[0-9a-fA-F-]{36}"
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def base_queryset(self) -> QuerySet[WebhookEndpoint]:
        return WebhookEndpoint.objects.select_related("owner")

    @extend_schema(
        summary="Subscribe a URL to events",
        description="goaai POSTs each event of the chosen types to the URL, signed as "
        "the Standard Webhooks specification says (`webhook-id`, `webhook-timestamp`, "
        "`webhook-signature` with the secret in the response, shown only now). A "
        "receiver that does not answer 2xx within the timeout is tried again: after "
        "5 s, 5 min, 30 min, 2 h, 5 h, 10 h and 10 h. A URL that resolves to a "
        "private or loopback address is refused (400).",
        request=WebhookEndpointCreateSerializer,
        responses={201: WebhookEndpointWithSecretSerializer},
        examples=[
            OpenApiExample(
                "Runs that end",
                value={
                    "url": "https://hooks.example.com/goaai",
                    "events": ["run.completed", "run.failed"],
                    "description": "CRM sync",
                },
                request_only=True,
            )
        ],
    )
    def create(self, request: Request) -> Response:
        body = WebhookEndpointCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            endpoint = services.webhook_endpoint_create(
                owner_id=request.user.pk,  # type: ignore[arg-type]
                **body.validated_data,
            )
        except services.InvalidWebhook as exc:
            raise _invalid(exc) from None
        shown = self.base_queryset().get(pk=endpoint.pk)
        return Response(
            WebhookEndpointWithSecretSerializer(shown).data, status=status.HTTP_201_CREATED
        )

    @extend_schema(
        summary="Change a webhook endpoint",
        description="Its URL, events, description, or `active` (false: nothing is sent "
        "to it, and deliveries that fall due meanwhile give up).",
        request=WebhookEndpointUpdateSerializer,
        responses={200: WebhookEndpointSerializer},
    )
    def partial_update(self, request: Request, pk: str) -> Response:
        endpoint = self.get_object()
        self.require(WebhookEndpoint, "change", endpoint.owner_id)
        body = WebhookEndpointUpdateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            services.webhook_endpoint_update(endpoint_id=endpoint.pk, **body.validated_data)
        except services.InvalidWebhook as exc:
            raise _invalid(exc) from None
        self.log_for_others(endpoint, endpoint.owner_id, CHANGE, "Changed the webhook endpoint")
        return Response(WebhookEndpointSerializer(self.base_queryset().get(pk=endpoint.pk)).data)

    @extend_schema(
        summary="Delete a webhook endpoint",
        description="With its deliveries and their log; nothing more is sent to it.",
        responses={204: None},
    )
    def destroy(self, request: Request, pk: str) -> Response:
        endpoint = self.get_object()
        self.require(WebhookEndpoint, "delete", endpoint.owner_id)
        self.log_for_others(endpoint, endpoint.owner_id, DELETION, "Deleted")
        services.webhook_endpoint_delete(endpoint_id=endpoint.pk)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        summary="Rotate the signing secret",
        description="A new secret, shown only in this response; every attempt from now "
        "on (retries of earlier messages too) is signed with it.",
        request=None,
        responses={200: WebhookEndpointWithSecretSerializer},
    )
    @action(detail=True, methods=["post"], url_path="rotate-secret")
    def rotate_secret(self, request: Request, pk: str) -> Response:
        endpoint = self.get_object()
        self.require(WebhookEndpoint, "change", endpoint.owner_id)
        services.webhook_secret_rotate(endpoint_id=endpoint.pk)
        self.log_for_others(endpoint, endpoint.owner_id, CHANGE, "Rotated the webhook secret")
        shown = self.base_queryset().get(pk=endpoint.pk)
        return Response(WebhookEndpointWithSecretSerializer(shown).data)

    @extend_schema(
        summary="Send a test message",
        description="Queues a `webhook.ping` message for the endpoint, whatever it "
        "subscribes to, and answers with its delivery (202): follow it in "
        "`GET /webhooks/deliveries/{id}/`.",
        request=None,
        responses={202: WebhookDeliverySerializer},
    )
    @action(detail=True, methods=["post"])
    def test(self, request: Request, pk: str) -> Response:
        endpoint = self.get_object()
        self.require(WebhookEndpoint, "change", endpoint.owner_id)
        delivery = services.webhook_ping(endpoint_id=endpoint.pk)
        shown = _deliveries().get(pk=delivery.pk)
        return Response(WebhookDeliverySerializer(shown).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        summary="List an endpoint's deliveries",
        description="Newest first, each with every attempt: when, the receiver's "
        "status, latency, error and the start of its answer.",
        responses={200: WebhookDeliverySerializer(many=True)},
    )
    @action(detail=True, methods=["get"])
    def deliveries(self, request: Request, pk: str) -> Response:
        endpoint = self.get_object()
        paginator = Cursor()
        page = paginator.paginate_queryset(
            _deliveries().filter(endpoint=endpoint), request, view=self
        )
        return paginator.get_paginated_response(WebhookDeliverySerializer(page, many=True).data)


@extend_schema_view(
    retrieve=extend_schema(summary="Get a webhook delivery", description="With its attempts."),
)
class WebhookDeliveryViewSet(mixins.RetrieveModelMixin, ScopedViewSet):
    owner_lookup = "endpoint__owner"
    serializer_class = WebhookDeliverySerializer
    filterset_class = None

    def base_queryset(self) -> QuerySet[WebhookDelivery]:
        return _deliveries().select_related("endpoint")

    @extend_schema(
        summary="Redeliver a message",
        description="Sends the message again now, with the same `webhook-id`, as one "
        "more attempt (202). A delivery that had given up stays given up if this "
        "attempt fails too; otherwise its retry schedule goes on.",
        request=None,
        responses={202: WebhookDeliverySerializer},
    )
    @action(detail=True, methods=["post"])
    def redeliver(self, request: Request, pk: str) -> Response:
        delivery = self.get_object()
        owner_id = delivery.endpoint.owner_id
        self.require(WebhookEndpoint, "change", owner_id)
        services.webhook_delivery_redeliver(delivery_id=delivery.pk)
        self.log_for_others(delivery.endpoint, owner_id, CHANGE, "Redelivered a message")
        shown = self.base_queryset().get(pk=delivery.pk)
        return Response(WebhookDeliverySerializer(shown).data, status=status.HTTP_202_ACCEPTED)
