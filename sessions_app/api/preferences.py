"""``/api/v1/me/preferences/``: what the caller chose on their settings page."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiExample, extend_schema
from drf_standardized_errors.openapi_validation_errors import extend_validation_errors
from rest_framework import serializers
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from goaai.api.fields import StrictCharField
from sessions_app import services
from sessions_app.models import UserPreferences
from sessions_app.selectors import user_preferences
from sessions_app.timezones import is_time_zone

TIME_ZONE_HELP = (
    'An IANA time zone name ("Europe/Paris"), in which goaai shows you times; '
    "empty: your browser's own."
)


class PreferencesSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    time_zone = serializers.CharField(help_text=TIME_ZONE_HELP)
    shortcuts_enabled = serializers.BooleanField(
        help_text="Whether single-key shortcuts (n, /, i, c, m, ?) work in the web UI."
    )
    updated_at = serializers.DateTimeField(
        allow_null=True, help_text="When they were last saved; null: never (the defaults)."
    )

    class Meta:
        model = UserPreferences
        fields = ["time_zone", "shortcuts_enabled", "updated_at"]
        read_only_fields = fields


class PreferencesUpdateSerializer(serializers.Serializer):  # type: ignore[type-arg]
    time_zone = StrictCharField(
        max_length=64, required=False, allow_blank=True, help_text=TIME_ZONE_HELP
    )
    shortcuts_enabled = serializers.BooleanField(
        required=False, help_text="Turn single-key shortcuts on or off."
    )

    def validate_time_zone(self, value: str) -> str:
        if value and not is_time_zone(value):
            raise serializers.ValidationError(
                f"{value!r} is not a time zone: use an IANA name such as Europe/Paris, "
                "or leave it empty for your browser's own.",
                code="unknown_time_zone",
            )
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if not attrs:
            raise serializers.ValidationError(
                "Send time_zone, shortcuts_enabled or both.", code="empty"
            )
        return attrs


@extend_validation_errors(["unknown_time_zone"], field_name="time_zone", methods=["patch"])
@extend_validation_errors(["empty"], field_name="non_field_errors", methods=["patch"])
class PreferencesView(APIView):
    """The caller's own preferences: nobody reads or changes another user's."""

    permission_classes = [IsAuthenticated]

    @extend_schema(
        operation_id="me_preferences_retrieve",
        summary="Your preferences",
        description="Your time zone and whether single-key shortcuts work in the web UI "
        "(the settings page at /settings/ shows the same). Before you save any, the "
        "defaults: the browser's time zone, shortcuts on.",
        responses={200: PreferencesSerializer},
    )
    def get(self, request: Request) -> Response:
        return Response(PreferencesSerializer(user_preferences(request.user)).data)

    @extend_schema(
        operation_id="me_preferences_partial_update",
        summary="Change your preferences",
        description="Send what changes; the rest stays.",
        request=PreferencesUpdateSerializer,
        responses={200: PreferencesSerializer},
        examples=[
            OpenApiExample(
                "A time zone, shortcuts off",
                value={"time_zone": "America/Los_Angeles", "shortcuts_enabled": False},
                request_only=True,
            )
        ],
    )
    def patch(self, request: Request) -> Response:
        body = PreferencesUpdateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        saved = services.user_preferences_update(
            user_id=request.user.pk,  # type: ignore[arg-type]
            **body.validated_data,
        )
        return Response(PreferencesSerializer(saved).data)
