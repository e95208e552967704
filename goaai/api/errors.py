"""One error shape for every 4xx and 5xx the API returns.

The shape is drf-standardized-errors'::

    {"type": "validation_error" | "client_error" | "server_error",
     "errors": [{"code": "...", "detail": "...", "attr": "field" | null}]}

goaai's own errors (unknown ids, illegal transitions, version conflicts) are mapped
here, once, to the status codes the API documents. A memory version conflict adds
``"current"``: the entry as it is now, so a client can show it and retry; a message
refused while a run is active adds ``"active_run"``: that run's id.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, JsonResponse
from django.views.defaults import page_not_found, server_error
from drf_standardized_errors.handler import ExceptionHandler
from rest_framework import exceptions
from rest_framework.response import Response

from goaai.api.exceptions import Conflict, PayloadTooLarge, RunActiveConflict, VersionConflict
from goaai.runtime import errors as goaai_errors


class GoaaiExceptionHandler(ExceptionHandler):
    def convert_known_exceptions(self, exc: Exception) -> Exception:
        if isinstance(exc, goaai_errors.NotFound):
            return exceptions.NotFound(str(exc))
        if isinstance(exc, goaai_errors.RunActive):
            return RunActiveConflict(str(exc), active_run=str(exc.active_run_id))
        if isinstance(
            exc,
            goaai_errors.SessionEnded | goaai_errors.IllegalTransition | goaai_errors.NotRedoable,
        ):
            return Conflict(str(exc), code=exc.code)
        if isinstance(exc, goaai_errors.UnknownAgent):
            return exceptions.ValidationError({"agent": [str(exc)]}, code=exc.code)
        if isinstance(exc, goaai_errors.InvalidMemoryScope):
            return exceptions.ValidationError({"scope": [str(exc)]}, code=exc.code)
        if isinstance(exc, goaai_errors.InvalidAnswer):
            return exceptions.ValidationError({exc.field: [str(exc)]}, code=exc.code)
        if isinstance(exc, RequestDataTooBig):
            return PayloadTooLarge()
        return super().convert_known_exceptions(exc)

    def get_response(self, exc: exceptions.APIException, data: Any) -> Response:
        if isinstance(exc, VersionConflict):
            data = {**data, "current": exc.current}
        if isinstance(exc, RunActiveConflict):
            data = {**data, "active_run": exc.active_run}
        return super().get_response(exc, data)


def _error(request: HttpRequest, status_code: int, kind: str, code: str, detail: str) -> Any:
    return JsonResponse(
        {"type": kind, "errors": [{"code": code, "detail": detail, "attr": None}]},
        status=status_code,
    )


def api_not_found(request: HttpRequest, exception: Exception | None = None) -> Any:
    """404 for a path under /api/ that no endpoint answers, in the API's shape."""
    if request.path.startswith("/api/"):
        return _error(request, 404, "client_error", "not_found", "No endpoint at this path.")
    return page_not_found(request, exception or Exception())


def api_server_error(request: HttpRequest) -> Any:
    """500 in the API's shape under /api/ (an unexpected error, already logged)."""
    if request.path.startswith("/api/"):
        return _error(request, 500, "server_error", "error", "A server error occurred.")
    return server_error(request)
