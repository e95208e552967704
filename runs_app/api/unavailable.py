"""What the API answers while a service it needs is away: 503, with Retry-After."""

from __future__ import annotations

from rest_framework import exceptions, status

# Redis restarts in seconds; a client that retries sooner only adds to the load.
RETRY_AFTER_SECONDS = 5


class ServiceUnavailable(exceptions.APIException):
    """503 Service Unavailable; the error handler adds ``Retry-After: <wait>``."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "The service is unavailable for a moment; retry shortly."
    default_code = "service_unavailable"

    def __init__(
        self, detail: str | None = None, code: str | None = None, *, wait: int = RETRY_AFTER_SECONDS
    ) -> None:
        super().__init__(detail, code)
        self.wait = wait
