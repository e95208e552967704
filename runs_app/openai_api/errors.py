"""Errors in the shape OpenAI's API sends, with the statuses its SDKs expect."""

from __future__ import annotations

from django.http import JsonResponse


class OpenAIError(Exception):
    """A refusal, answered as ``{"error": {"message", "type", "param", "code"}}``."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        type: str = "invalid_request_error",
        retry_after: int | None = None,
        should_retry: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param
        self.type = type
        self.retry_after = retry_after
        # Told to OpenAI's SDKs, which otherwise retry every 408, 409, 429 and 5xx.
        self.should_retry = should_retry

    def body(self) -> dict[str, dict[str, str | None]]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }

    def response(self) -> JsonResponse:
        response = JsonResponse(self.body(), status=self.status)
        if self.status == 401:
            response["WWW-Authenticate"] = 'Bearer realm="goaai"'
        if self.retry_after is not None:
            response["Retry-After"] = str(self.retry_after)
        if self.should_retry is not None:
            response["X-Should-Retry"] = "true" if self.should_retry else "false"
        return response


def invalid(message: str, *, param: str | None = None, code: str | None = None) -> OpenAIError:
    return OpenAIError(400, message, param=param, code=code)


def not_found(message: str, *, code: str = "not_found", param: str | None = None) -> OpenAIError:
    return OpenAIError(404, message, code=code, param=param)


def conflict(message: str, *, code: str) -> OpenAIError:
    return OpenAIError(409, message, code=code)
