"""What every page's template knows of the signed-in user's preferences."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject

from sessions_app.selectors import user_preferences


def preferences(request: HttpRequest) -> dict[str, Any]:
    """``user_preferences``: read only if the page uses it (signed-in pages do, for
    the shortcuts switch), at most once per request."""
    return {"user_preferences": SimpleLazyObject(lambda: user_preferences(request.user))}
