"""Every endpoint under /api/v1/: the apps' views, put together."""

from __future__ import annotations

from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.routers import SimpleRouter

from memory_app.api.views import MemoryViewSet
from runs_app.api.agents import AgentDetailView, AgentListView, AgentVersionListView
from runs_app.api.datasets import ScoredRunsDatasetView
from runs_app.api.feedback import RunFeedbackViewSet
from runs_app.api.redo import RunRedoViewSet
from runs_app.api.scores import RunScoreViewSet
from runs_app.api.usage import UsageViewSet
from runs_app.api.views import (
    RunViewSet,
    SessionEventViewSet,
    SessionExportViewSet,
    SessionRunViewSet,
    ToolCallViewSet,
    TurnViewSet,
)
from sessions_app.api import sse
from sessions_app.api.preferences import PreferencesView
from sessions_app.api.views import ApiTokenViewSet, SessionViewSet
from sessions_app.api.webhooks import WebhookDeliveryViewSet, WebhookEndpointViewSet

router = SimpleRouter()
router.register("sessions", SessionViewSet, basename="session")
router.register("runs", RunViewSet, basename="run")
router.register("turns", TurnViewSet, basename="turn")
router.register("tool-calls", ToolCallViewSet, basename="tool-call")
router.register("memory", MemoryViewSet, basename="memory")
router.register("auth/tokens", ApiTokenViewSet, basename="api-token")
router.register("webhooks/deliveries", WebhookDeliveryViewSet, basename="webhook-delivery")
router.register("webhooks", WebhookEndpointViewSet, basename="webhook")

app_name = "api"

urlpatterns = [
    # Live streams (Server-Sent Events): plain async views, outside DRF.
    path("sessions/stream/", sse.session_list_stream, name="session-list-stream"),
    path(
        "sessions/<uuid:session_id>/events/stream/",
        sse.session_event_stream,
        name="session-event-stream",
    ),
    path(
        "sessions/<uuid:session_id>/runs/",
        SessionRunViewSet.as_view({"get": "list", "post": "create"}),
        name="session-runs",
    ),
    path(
        "sessions/<uuid:session_id>/events/",
        SessionEventViewSet.as_view({"get": "list"}),
        name="session-events",
    ),
    path(
        "sessions/<uuid:pk>/export/",
        SessionExportViewSet.as_view({"get": "export"}),
        name="session-export",
    ),
    *(
        path(
            f"runs/<uuid:pk>/{how}/",
            RunRedoViewSet.as_view({"post": how}),
            name=f"run-{how}",
        )
        for how in ("retry", "regenerate", "edit", "fork")
    ),
    path(
        "runs/<uuid:pk>/feedback/",
        RunFeedbackViewSet.as_view({"post": "give", "delete": "take_back"}),
        name="run-feedback",
    ),
    path(
        "runs/<uuid:pk>/scores/",
        RunScoreViewSet.as_view({"get": "list", "post": "create"}),
        name="run-scores",
    ),
    path(
        "runs/<uuid:pk>/scores/<uuid:score_id>/",
        RunScoreViewSet.as_view(
            {"get": "retrieve", "patch": "partial_update", "delete": "destroy"}
        ),
        name="run-score",
    ),
    path(
        "datasets/scored-runs.jsonl",
        ScoredRunsDatasetView.as_view(),
        name="dataset-scored-runs",
    ),
    path("me/preferences/", PreferencesView.as_view(), name="me-preferences"),
    path("usage/", UsageViewSet.as_view({"get": "report"}), name="usage"),
    path("agents/", AgentListView.as_view(), name="agents"),
    path("agents/<str:agent_id>/", AgentDetailView.as_view(), name="agent-detail"),
    path(
        "agents/<str:agent_id>/versions/",
        AgentVersionListView.as_view(),
        name="agent-versions",
    ),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api:schema"), name="docs"),
    path("", include(router.urls)),
]
