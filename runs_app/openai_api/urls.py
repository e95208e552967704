"""The OpenAI-compatible routes, mounted at ``/v1/`` (see goaai.urls)."""

from __future__ import annotations

from django.urls import path, re_path

from runs_app.openai_api import views

app_name = "openai"

urlpatterns = [
    path("models", views.models, name="models"),
    path("models/<str:model>", views.model_detail, name="model"),
    path("chat/completions", views.chat_completions, name="chat-completions"),
    path("responses", views.responses, name="responses"),
    path("responses/<str:response_id>", views.response_detail, name="response"),
    # Anything else under /v1/ is a 404 in OpenAI's shape, not a page.
    re_path(r"^(?P<rest>.*)$", views.unknown, name="unknown"),
]
