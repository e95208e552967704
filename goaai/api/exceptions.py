"""The API's own error statuses (the handler in ``goaai.api.errors`` shapes them)."""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions, status


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The request conflicts with the current state of the resource."
    default_code = "conflict"


class RunActiveConflict(Conflict):
    """A message refused because a run of the session is active (its policy is
    ``multitask: reject``); carries that run's id for the client to follow or stop."""

    default_code = "run_active"

    def __init__(self, detail: str, active_run: str) -> None:
        super().__init__(detail, code=self.default_code)
        self.active_run = active_run


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is too large."
    default_code = "payload_too_large"


class VersionConflict(Conflict):
    """A stale version; carries the record as it is now, as the API shows it (or
    ``None``), for the client to retry on top of."""

    default_code = "version_conflict"

    def __init__(self, detail: str, current: Any) -> None:
        super().__init__(detail, code=self.default_code)
        self.current = current
