"""The price table in the operators' console: what each model of a profile costs
per million tokens of each kind, from a moment on.

Prices are the one thing here operators write: staff with ``runs_app.add_modelprice``
add them, ``change_modelprice`` corrects one, ``delete_modelprice`` removes one, as
Django's permissions go. A turn's cost is computed with the price in force when it
is recorded and stored with it, so a new or corrected price changes what later
turns cost, never what was recorded.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from runs_app.models import ModelPrice


class ModelPriceAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = [
        "profile",
        "model",
        "effective_from",
        "input_per_million",
        "output_per_million",
        "cached_input_per_million",
        "cache_write_per_million",
        "reasoning_per_million",
        "created_by",
        "created_at",
    ]
    # A table of a few rows per model: its distinct profiles and models are cheap.
    list_filter = ["profile", "model"]
    search_fields = ["profile", "model"]
    list_select_related = ["created_by"]
    ordering = ["profile", "model", "-effective_from"]
    fields = (
        "profile",
        "model",
        "effective_from",
        "input_per_million",
        "output_per_million",
        "cached_input_per_million",
        "cache_write_per_million",
        "reasoning_per_million",
        "created_by",
        "created_at",
    )
    readonly_fields = ("created_by", "created_at")

    def save_model(self, request: HttpRequest, obj: ModelPrice, form: Any, change: bool) -> None:
        # Who entered the price is who saved it first; later corrections are in the
        # admin log, which names whoever made them.
        if not change:
            obj.created_by = request.user  # type: ignore[assignment]
        super().save_model(request, obj, form, change)
