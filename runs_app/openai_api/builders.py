"""What goaai recorded of an exchange, as OpenAI's objects: a chat completion, a
response, their usage. Read from the run's records, so that an answer given live
and one read back later (a replay, ``GET /v1/responses/{id}``) are the same."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from goaai.runtime.public_errors import public_error_message
from goaai.runtime.types import USAGE_KINDS, Usage
from goaai.runtime.vocabulary import AwaitingKind, FinishReason, RunStatus
from runs_app.models import Run, ToolCall, Turn
from runs_app.openai_api.errors import OpenAIError
from runs_app.openai_api.exchange import call_id

# Between the text of one turn and the next (one said before calling tools, say).
TURN_SEPARATOR = "\n\n"


@dataclass(frozen=True)
class PendingCall:
    """A call of one of the caller's tools the run waits on."""

    id: str
    item_id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class State:
    """An exchange of a run (its turns from ``first_turn`` on) as recorded now."""

    run: Run
    first_turn: int
    text: str
    calls: list[PendingCall]
    usage: Usage
    finish_reason: str

    @property
    def settled(self) -> bool:
        """Whether the exchange is over: the run ended or waits (for the caller's
        tools, or for a person: see :func:`awaiting_notice`)."""
        return RunStatus(self.run.status).is_terminal or self.run.status == RunStatus.AWAITING_INPUT

    @property
    def awaiting_person(self) -> bool:
        """Whether the run waits for a person (an approval, an answer), not for the
        caller's tools."""
        return self.run.status == RunStatus.AWAITING_INPUT and not self.calls

    @property
    def message_id(self) -> str:
        return f"msg_{self.run.pk.hex}_{self.first_turn}"


def state(run_id: UUID, first_turn: int = 0) -> State:
    run = Run.objects.get(pk=run_id)
    turns = list(
        Turn.objects.filter(run_id=run_id, index__gte=first_turn)
        .order_by("index")
        .only("response_text", "finish_reason", *USAGE_KINDS)
    )
    usage = Usage()
    for turn in turns:
        usage = usage + Usage.of(turn)
    calls = _pending_calls(run)
    if calls:
        finish = "tool_calls"
    elif turns and turns[-1].finish_reason == FinishReason.LENGTH:
        finish = "length"
    else:
        finish = "stop"
    said = [t.response_text for t in turns if t.response_text]
    if run.status == RunStatus.AWAITING_INPUT and not calls:
        said.append(awaiting_notice(run))
    return State(
        run=run,
        first_turn=first_turn,
        text=TURN_SEPARATOR.join(said),
        calls=calls,
        usage=usage,
        finish_reason=finish,
    )


_WAITS_FOR: dict[str, str] = {
    AwaitingKind.APPROVAL: "a person to approve or deny one of its tool calls",
    AwaitingKind.QUESTION: 'an answer to its question "{question}"',
    AwaitingKind.DELEGATED: "a person, through an agent it called",
}


def awaiting_notice(run: Run) -> str:
    """What an exchange says of a run that waits for a person: the exchange ends
    there (OpenAI's APIs have no such wait) and names the run and how to answer."""
    awaiting = run.awaiting or {}
    template = _WAITS_FOR.get(str(awaiting.get("kind") or ""), "input")
    what = template.format(question=awaiting.get("question") or "")
    return (
        f"[goaai] Run {run.pk} waits for {what.strip()}. Answer it with "
        f"POST /api/v1/runs/{run.pk}/respond/ or in the chat at /sessions/{run.session_id}/; "
        f"its answer is then at GET /v1/responses/resp_{run.pk.hex}."
    )


def _pending_calls(run: Run) -> list[PendingCall]:
    awaiting = run.awaiting or {}
    if run.status != RunStatus.AWAITING_INPUT or awaiting.get("kind") != AwaitingKind.CLIENT_TOOL:
        return []
    ids = awaiting.get("tool_calls") or [awaiting.get("tool_call")]
    rows = (
        ToolCall.objects.filter(pk__in=ids).order_by("index").values_list("id", "name", "arguments")
    )
    return [
        PendingCall(
            id=call_id(pk),
            item_id=f"fc_{pk.hex}",
            name=name,
            arguments=json.dumps(arguments, ensure_ascii=False),
        )
        for pk, name, arguments in rows
    ]


def _told(run: Run) -> str:
    """Why the run did not answer, as its caller is told: the provider's own words
    (addresses, error numbers) stay on the run, for operators."""
    return public_error_message(kind=run.error_kind, message=run.error_message, status=run.status)


def refusal(current: State) -> OpenAIError | None:
    """The error a run that did not answer is, for the chat API (which has no
    failed completion): ``None`` for a run that answered or waits.

    A run that failed or timed out is recorded and over: a 422 the SDKs do not
    retry (a retry would start the same run again), with ``X-Should-Retry: false``
    to make sure. One still running once the wait is spent is a 504; a retry of it
    follows the same run (see :func:`runs_app.openai_api.exchange.begin`)."""
    run = current.run
    if run.status == RunStatus.FAILED:
        return OpenAIError(
            422,
            f"The agent's run {run.pk} failed ({run.error_kind}): {_told(run)}",
            code=run.error_kind or "run_failed",
            type="run_error",
            should_retry=False,
        )
    if run.status == RunStatus.TIMED_OUT:
        return OpenAIError(
            422,
            f"The agent's run {run.pk} timed out: {_told(run)}",
            code="timeout",
            type="run_error",
            should_retry=False,
        )
    if not current.settled:
        return OpenAIError(
            504,
            f"The agent's run {run.pk} is still {run.status}; follow it at /api/v1/runs/{run.pk}/.",
            code="still_running",
            type="server_error",
        )
    return None


# Chat completions


def chat_usage(usage: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_input_tokens},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }


def chat_tool_calls(calls: list[PendingCall], *, indexed: bool = False) -> list[dict[str, Any]]:
    return [
        {
            **({"index": index} if indexed else {}),
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments},
        }
        for index, call in enumerate(calls)
    ]


def goaai_extra(run: Run) -> dict[str, Any]:
    """Where the exchange is recorded (a field OpenAI's SDKs keep as an extra)."""
    extra = {"run": str(run.pk), "session": str(run.session_id), "status": run.status}
    if run.status == RunStatus.AWAITING_INPUT:
        extra["awaiting"] = str((run.awaiting or {}).get("kind") or "")
    return extra


def chat_id(run: Run) -> str:
    return f"chatcmpl-{run.pk.hex}"


def chat_completion(current: State, model: str) -> dict[str, Any]:
    run = current.run
    message: dict[str, Any] = {
        "role": "assistant",
        "content": current.text if current.text or not current.calls else None,
        "refusal": None,
    }
    if current.calls:
        message["tool_calls"] = chat_tool_calls(current.calls)
    return {
        "id": chat_id(run),
        "object": "chat.completion",
        "created": int(run.created_at.timestamp()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": current.finish_reason,
                "logprobs": None,
            }
        ],
        "usage": chat_usage(current.usage),
        "system_fingerprint": None,
        "goaai": goaai_extra(run),
    }


def chat_chunk(run: Run, model: str, delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
    return {
        "id": chat_id(run),
        "object": "chat.completion.chunk",
        "created": int(run.created_at.timestamp()),
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
    }


# Responses

_RESPONSE_STATUS = {
    RunStatus.COMPLETED: "completed",
    RunStatus.FAILED: "failed",
    RunStatus.TIMED_OUT: "failed",
    RunStatus.CANCELED: "cancelled",
}


def response_id(run: Run) -> str:
    return f"resp_{run.pk.hex}"


def response_usage(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {
            "cached_tokens": usage.cached_input_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
        },
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.total_tokens,
    }


def message_item(current: State, *, done: bool = True) -> dict[str, Any]:
    return {
        "type": "message",
        "id": current.message_id,
        "status": "completed" if done else "in_progress",
        "role": "assistant",
        "content": [output_text(current.text)] if done else [],
    }


def output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def function_call_item(call: PendingCall, *, done: bool = True) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": call.item_id,
        "call_id": call.id,
        "name": call.name,
        "arguments": call.arguments if done else "",
        "status": "completed" if done else "in_progress",
    }


def response_status(current: State) -> str:
    if current.calls:
        return "completed"
    if current.awaiting_person:
        return "incomplete"
    status = _RESPONSE_STATUS.get(RunStatus(current.run.status))
    return status or "in_progress"


def response_object(
    current: State, model: str, *, status: str | None = None, with_output: bool = True
) -> dict[str, Any]:
    run = current.run
    output: list[dict[str, Any]] = []
    if with_output:
        if current.text:
            output.append(message_item(current))
        output += [function_call_item(call) for call in current.calls]
    status = status or response_status(current)
    error = None
    if status == "failed":
        error = {"code": "server_error", "message": f"{run.error_kind}: {_told(run)}"}
    return {
        "id": response_id(run),
        "object": "response",
        "created_at": run.created_at.timestamp(),
        "completed_at": run.ended_at.timestamp() if run.ended_at and with_output else None,
        "status": status,
        "error": error,
        "incomplete_details": {"reason": "awaiting_input"} if status == "incomplete" else None,
        "instructions": run.instructions or None,
        "metadata": {},
        "model": model,
        "output": output,
        "parallel_tool_calls": True,
        "temperature": None,
        "tool_choice": "auto",
        "tools": [{"type": "function", "strict": False, **spec} for spec in run.client_tools],
        "top_p": None,
        "previous_response_id": f"resp_{run.previous_run_id.hex}" if run.previous_run_id else None,
        "conversation": {"id": str(run.session_id)},
        "usage": response_usage(current.usage) if with_output else None,
        "goaai": goaai_extra(run),
    }
