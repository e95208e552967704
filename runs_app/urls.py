"""The web pages' routes (the API lives under /api/v1/, see goaai.api_urls)."""

from __future__ import annotations

from django.urls import path

from runs_app import views

app_name = "sessions"

urlpatterns = [
    path("", views.session_list, name="list"),
    path("sessions/new/", views.session_new, name="new"),
    path("sessions/<uuid:session_id>/", views.session_chat, name="chat"),
]
