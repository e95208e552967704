"""What a request to ``/v1/`` may say, read strictly: a body that is not the JSON
object OpenAI's API takes is a 400 naming the field, never a crash.

Fields goaai does not use (``temperature``, ``max_tokens``, ``user``, ...) are
accepted and ignored, as chat front-ends send them; the agent's own model settings
decide. What goaai adds: ``session``, the session to continue (also the
``X-Goaai-Session`` header).
"""

from __future__ import annotations

import json
from typing import Any, Literal, TypeVar

import pydantic
from django.conf import settings
from django.http import HttpRequest
from rest_framework.exceptions import ParseError

from goaai.api.fields import has_nul
from goaai.api.parsers import check_parsed
from runs_app.openai_api.errors import OpenAIError, invalid

# More than any conversation a client resends needs; bounds the work of a request.
MAX_MESSAGES = 1000
MAX_TOOLS = 128
TOOL_NAME = r"^[A-Za-z0-9_-]{1,64}$"


class _Strict(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(strict=True, extra="ignore")


class TextPart(_Strict):
    """A part of a message's content: goaai's agents read text only."""

    type: str
    text: str | None = None


Content = str | list[TextPart] | None


class FunctionCall(_Strict):
    name: str = pydantic.Field(max_length=64)
    arguments: str = ""


class ChatToolCall(_Strict):
    id: str = pydantic.Field(max_length=200)
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(_Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Content = None
    tool_calls: list[ChatToolCall] | None = None
    tool_call_id: str | None = pydantic.Field(default=None, max_length=200)
    name: str | None = None


class FunctionDefinition(_Strict):
    name: str = pydantic.Field(pattern=TOOL_NAME)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ChatTool(_Strict):
    type: Literal["function"]
    function: FunctionDefinition


class StreamOptions(_Strict):
    include_usage: bool = False


class ChatCompletionRequest(_Strict):
    model: str = pydantic.Field(min_length=1, max_length=200)
    messages: list[ChatMessage] = pydantic.Field(min_length=1, max_length=MAX_MESSAGES)
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    tools: list[ChatTool] | None = pydantic.Field(default=None, max_length=MAX_TOOLS)
    tool_choice: str | dict[str, Any] | None = None
    session: str | None = pydantic.Field(default=None, max_length=100)


class ResponseTool(_Strict):
    type: Literal["function"]
    name: str = pydantic.Field(pattern=TOOL_NAME)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class InputItem(_Strict):
    """One item of a Responses ``input``: a message (``type`` ``message`` or none),
    a tool result (``function_call_output``), or a call the model made earlier
    (``function_call``), as clients send the conversation back."""

    type: Literal["message", "function_call", "function_call_output"] | None = None
    role: Literal["system", "developer", "user", "assistant"] | None = None
    content: Content = None
    call_id: str | None = pydantic.Field(default=None, max_length=200)
    output: str | list[TextPart] | None = None
    name: str | None = None
    arguments: str | None = None


class Conversation(_Strict):
    id: str = pydantic.Field(max_length=100)


class ResponsesRequest(_Strict):
    model: str = pydantic.Field(min_length=1, max_length=200)
    input: str | list[InputItem] = pydantic.Field(min_length=1)
    instructions: str | None = None
    previous_response_id: str | None = pydantic.Field(default=None, max_length=100)
    conversation: str | Conversation | None = None
    stream: bool | None = False
    tools: list[ResponseTool] | None = pydantic.Field(default=None, max_length=MAX_TOOLS)
    tool_choice: str | dict[str, Any] | None = None
    session: str | None = pydantic.Field(default=None, max_length=100)


def json_body(request: HttpRequest) -> dict[str, Any]:
    """The request's body as a JSON object, within the API's size limit."""
    limit = int(settings.GOAAI_API_MAX_BODY_BYTES)
    declared = request.META.get("CONTENT_LENGTH") or ""
    if declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    body = request.read(limit + 1)
    if len(body) > limit:
        raise _too_large(limit)
    try:
        data = json.loads(body)
        check_parsed(data)
    except (ValueError, RecursionError) as exc:
        message = "nested too deep" if isinstance(exc, RecursionError) else str(exc)
        raise invalid(f"The body is not valid JSON: {message}.", code="invalid_json") from None
    except ParseError as exc:
        raise invalid(str(exc.detail), code="invalid_json") from None
    if not isinstance(data, dict):
        raise invalid("The body must be a JSON object.", code="invalid_json")
    if has_nul(data):
        raise invalid("Text may not contain NUL characters.", code="invalid_value")
    return data


def _too_large(limit: int) -> OpenAIError:
    return OpenAIError(
        413, f"The request body is larger than {limit} bytes.", code="payload_too_large"
    )


M = TypeVar("M", bound=pydantic.BaseModel)


def parse(model: type[M], data: dict[str, Any]) -> M:
    """``data`` as ``model``; a 400 naming the first field that is wrong."""
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        param = _param(error["loc"])
        raise invalid(f"{param or 'body'}: {error['msg']}", param=param) from None


_TYPE_TAGS = frozenset({"str", "int", "float", "bool", "dict", "list", "none"})


def _param(loc: tuple[int | str, ...]) -> str:
    """A field's place as OpenAI names it: ``messages[0].content``."""
    place = ""
    for part in loc:
        if isinstance(part, int):
            place += f"[{part}]"
        elif "[" in part or part[:1].isupper() or part in _TYPE_TAGS:
            # pydantic's names for the branches of a union ("str", "list[...]").
            continue
        else:
            place += f".{part}" if place else part
    return place


def text_of(content: Content, where: str) -> str:
    """The text of a message's content (a string, or its text parts joined)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts = []
    for index, part in enumerate(content):
        if part.type not in ("text", "input_text", "output_text"):
            raise invalid(
                f"{where}[{index}]: goaai's agents read text only, not {part.type!r}.",
                param=f"{where}[{index}].type",
                code="unsupported_content",
            )
        texts.append(part.text or "")
    return "".join(texts)
