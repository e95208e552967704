"""What a model request may carry: the context budget, and the history that fits it.

A session is meant to live long. Each run sees the runs before it on its branch:
the most recent ones in full (every turn, tool call and result, a result bounded
as the run itself saw it), and the older ones as a summary that the agent's own
model wrote when they stopped fitting. The summary is recorded and reused by the
runs after it until the runs since it no longer fit; then a new one folds them in.

Token counts are the provider's where it reported them (a reply's output tokens)
and otherwise estimated at :data:`CHARS_PER_TOKEN` characters a token, the rule of
thumb the providers themselves give for English text, plus
:data:`MESSAGE_OVERHEAD` tokens a message for its role and framing.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from goaai.runtime.conversation import (
    DEFAULT_CONTEXT_TOKENS,
    SUMMARY_INSTRUCTIONS,
    ConversationSettings,
)
from goaai.runtime.models.base import ModelSettings, ToolSpec
from goaai.runtime.types import EarlierRun, Message, SummaryState, ToolCallRequest, Usage
from goaai.runtime.vocabulary import FinishReason, RunStatus, ToolCallStatus, TurnInterruption

CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD = 4
# The reply's room, kept out of the budget when the agent sets no output limit.
DEFAULT_OUTPUT_RESERVE = 1_024
# How long a summary may grow, at most, and as a share of the history's room.
MAX_SUMMARY_TOKENS = 1_500
# When the runs since the summary stop fitting, the newest of them are kept in full
# up to this share of the history's room, and the rest folded into a new summary:
# the runs that follow then fit for a while, and the summary is reused meanwhile.
KEEP_SHARE_AFTER_SUMMARY = 0.5
# How far back a run's history is walked past the latest summary. The runs that fit
# a context budget are far fewer, so this bounds only a session whose runs were
# never summarised (one older than summaries).
MAX_HISTORY_RUNS = 200
# Of a result in the transcript the summariser reads.
TRANSCRIPT_RESULT_CHARS = 600

SUMMARY_HEADING = "Summary of the earlier conversation ({runs} earlier exchanges):"


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN) if text else 0


def message_tokens(message: Message) -> int:
    calls = (
        json.dumps([call.as_dict() for call in message.tool_calls]) if message.tool_calls else ""
    )
    return MESSAGE_OVERHEAD + estimate_tokens(message.content) + estimate_tokens(calls)


def messages_tokens(messages: Iterable[Message]) -> int:
    return sum(message_tokens(m) for m in messages)


def estimated_usage(request: Iterable[Message], text: str, specs: Sequence[ToolSpec] = ()) -> Usage:
    """The usage of a reply that ended before the provider reported any (stopped,
    failed or lost mid-answer): the request it was sent and the text said so far,
    estimated as the rest of the context budget is. Recorded as estimated."""
    return Usage(
        input_tokens=messages_tokens(request) + tools_tokens(specs),
        output_tokens=estimate_tokens(text),
    )


def partial_usage(
    reported: Usage | None,
    request: Sequence[Message],
    text: str,
    specs: Sequence[ToolSpec] = (),
) -> tuple[Usage, bool]:
    """The usage of a reply that ended before it finished, and whether any of it
    is estimated: what the provider reported by then where it did (Anthropic counts
    the prompt when the stream opens; some servers count as they go), the rest
    estimated as :func:`estimated_usage` does. A provider's output count below what
    the text said so far shows was reported before that text, and is estimated."""
    estimate = estimated_usage(request, text, specs)
    if reported is None:
        return estimate, True
    prompt_known = reported.prompt_tokens > 0
    output_known = reported.output_tokens > 0 and reported.output_tokens >= estimate.output_tokens
    used = Usage(
        input_tokens=reported.input_tokens if prompt_known else estimate.input_tokens,
        output_tokens=reported.output_tokens if output_known else estimate.output_tokens,
        cached_input_tokens=reported.cached_input_tokens if prompt_known else 0,
        cache_write_tokens=reported.cache_write_tokens if prompt_known else 0,
        reasoning_tokens=reported.reasoning_tokens if output_known else 0,
    )
    return used, not (prompt_known and output_known)


def tools_tokens(specs: Sequence[ToolSpec]) -> int:
    """What describing the tools to the model costs (their names, descriptions and
    argument schemas travel with every request)."""
    return sum(
        MESSAGE_OVERHEAD
        + estimate_tokens(spec.name + spec.description + json.dumps(spec.parameters))
        for spec in specs
    )


def input_budget(
    conversation: ConversationSettings, settings: ModelSettings, window: int | None
) -> int:
    """The most tokens one request's input may hold: the agent's context budget (or
    its model's window, or :data:`DEFAULT_CONTEXT_TOKENS`), less the room kept for
    the reply."""
    total = conversation.context_tokens or window or DEFAULT_CONTEXT_TOKENS
    reserve = min(settings.max_output_tokens or DEFAULT_OUTPUT_RESERVE, total // 4)
    return total - reserve


# Tool results

# The tool that reads on in a truncated result (goaai.runtime.tools.results).
READ_RESULT_TOOL = "read_tool_result"


def tool_message(
    *,
    request: ToolCallRequest,
    outcome: dict[str, Any],
    is_error: bool,
    tool_call_id: UUID | None,
    limit: int,
) -> Message:
    """The ``tool`` message that gives the model a call's outcome, bounded to
    ``limit`` characters (see :func:`bounded`); a piece read with
    :data:`READ_RESULT_TOOL` comes as long as the model asked for it."""
    content = json.dumps(outcome, default=str)
    if request.name != READ_RESULT_TOOL:
        content = bounded(content, limit, tool_call_id)
    return Message(
        role="tool",
        content=content,
        tool_call_id=request.id,
        name=request.name,
        is_error=is_error,
    )


def bounded(content: str, limit: int, tool_call_id: UUID | None) -> str:
    """``content`` if it is at most ``limit`` characters; else its start, and a
    marker that says how much was left out and how to read it (the whole result
    stays recorded)."""
    if len(content) <= limit:
        return content
    more = (
        f'; call {READ_RESULT_TOOL} with tool_call_id="{tool_call_id}" and offset={limit} '
        "to read more"
        if tool_call_id is not None
        else ""
    )
    return (
        f"{content[:limit]}\n[... truncated: the first {limit} of {len(content)} characters{more}]"
    )


_POINTER = re.compile(r'\[\.\.\. truncated: .*tool_call_id="([^"]+)"[^\]]*\]$')


def shortened(content: str, limit: int) -> str:
    """``content`` (a tool message's) cut to ``limit`` characters, as
    :func:`bounded` cuts it, keeping the way to read the rest when it had one."""
    pointer = _POINTER.search(content)
    tool_call_id = UUID(pointer.group(1)) if pointer else None
    return bounded(content, limit, tool_call_id)


# History


def run_messages(run: EarlierRun, result_chars: int) -> list[Message]:
    """An earlier run as the conversation shows it: the user's message; each turn's
    reply with the calls it made and their (bounded) results; and how it ended when
    it did not answer. Calls that never produced a result are said to have not run,
    so that every call the model sees has an answer."""
    return [message for message, _ in _rendered(run, result_chars)]


def run_tokens(run: EarlierRun, result_chars: int) -> tuple[list[Message], int]:
    """An earlier run's messages and their tokens: each reply as the provider
    counted it where it did, the rest estimated."""
    rendered = _rendered(run, result_chars)
    tokens = sum(
        MESSAGE_OVERHEAD + reported if reported else message_tokens(message)
        for message, reported in rendered
    )
    return [message for message, _ in rendered], tokens


def _rendered(run: EarlierRun, result_chars: int) -> list[tuple[Message, int]]:
    """``run``'s messages, each with the tokens its provider reported (0: none)."""
    out: list[tuple[Message, int]] = [(Message(role="user", content=run.input), 0)]
    answered = False
    for turn in run.turns:
        calls = turn.response_tool_calls
        if (
            not turn.ended
            or turn.interruption == TurnInterruption.CRASHED
            or (turn.finish_reason == FinishReason.LENGTH and (calls or not turn.response_text))
        ):
            # Never answered, lost with its worker, or cut off before it was usable:
            # each was asked again.
            continue
        if not calls:
            if turn.response_text:
                out.append(
                    (Message(role="assistant", content=turn.response_text), turn.output_tokens)
                )
                answered = True
            continue
        reply = Message(role="assistant", content=turn.response_text, tool_calls=calls)
        out.append((reply, turn.output_tokens))
        recorded = {state.index: state for state in turn.tool_calls}
        for position, request in enumerate(calls):
            state = recorded.get(position)
            if state is None or state.status not in _RESULT_STATUSES:
                outcome: dict[str, Any] = {
                    "ok": False,
                    "error": {"kind": "canceled", "message": "This call did not run."},
                }
                failed = True
            else:
                outcome = state.outcome.for_model()
                failed = not state.outcome.ok
            message = tool_message(
                request=request,
                outcome=outcome,
                is_error=failed,
                tool_call_id=state.id if state else None,
                limit=result_chars,
            )
            out.append((message, 0))
    if not answered:
        out.append((Message(role="assistant", content=_unanswered(run)), 0))
    elif run.status == RunStatus.CANCELED:
        last, _ = out[-1]
        out[-1] = (Message(role="assistant", content=f"{last.content} [stopped]"), 0)
    return out


_RESULT_STATUSES = {ToolCallStatus.SUCCEEDED, ToolCallStatus.FAILED, ToolCallStatus.DENIED}


def _unanswered(run: EarlierRun) -> str:
    if run.status == RunStatus.CANCELED:
        return "[The user stopped this answer before it was given.]"
    if run.status in (RunStatus.FAILED, RunStatus.TIMED_OUT):
        detail = f": {run.error_message}" if run.error_message else ""
        return f"[This request failed{detail}]"
    return "[No answer was given.]"


@dataclass(frozen=True)
class HistoryPlan:
    """What the history of a new run is made of: the summary in force (``summary``),
    the earlier runs shown in full after it, oldest first (``kept``, with their
    messages), and the runs to fold into a new summary first (``fold``, oldest first;
    empty when nothing needs summarising)."""

    summary: SummaryState | None
    kept: tuple[tuple[EarlierRun, tuple[Message, ...]], ...]
    fold: tuple[EarlierRun, ...]
    summary_tokens: int

    def messages(self, summary_text: str | None, runs_covered: int) -> list[Message]:
        """The history's messages, given the summary's text (the new one when runs
        were folded, else the one in force)."""
        out: list[Message] = []
        if summary_text:
            out.append(summary_message(summary_text, runs_covered))
        for _, messages in self.kept:
            out.extend(messages)
        return out


def summary_message(text: str, runs: int) -> Message:
    return Message(role="system", content=f"{SUMMARY_HEADING.format(runs=runs)}\n{text}")


def summary_budget(history_tokens: int) -> int:
    return max(64, min(MAX_SUMMARY_TOKENS, history_tokens // 4))


def plan_history(
    history: Sequence[EarlierRun],
    summary: SummaryState | None,
    *,
    history_tokens: int,
    result_chars: int,
) -> HistoryPlan:
    """Fit the runs since ``summary`` into ``history_tokens``: all of them if they
    fit with the summary; else the newest that fit in
    :data:`KEEP_SHARE_AFTER_SUMMARY` of the room left beside a new summary, the
    older ones to be folded into it."""
    rendered: list[tuple[EarlierRun, tuple[Message, ...]]] = []
    sizes: list[int] = []
    for run in history:
        messages, tokens = run_tokens(run, result_chars)
        rendered.append((run, tuple(messages)))
        sizes.append(tokens)
    current = _summary_tokens(summary)
    if current + sum(sizes) <= history_tokens:
        return HistoryPlan(summary=summary, kept=tuple(rendered), fold=(), summary_tokens=current)
    new_summary = summary_budget(history_tokens)
    room = (history_tokens - new_summary) * KEEP_SHARE_AFTER_SUMMARY
    kept_from = len(rendered)
    used = 0
    while kept_from > 0 and used + sizes[kept_from - 1] <= room:
        kept_from -= 1
        used += sizes[kept_from]
    return HistoryPlan(
        summary=summary,
        kept=tuple(rendered[kept_from:]),
        fold=tuple(run for run, _ in rendered[:kept_from]),
        summary_tokens=new_summary,
    )


def _summary_tokens(summary: SummaryState | None) -> int:
    if summary is None:
        return 0
    return message_tokens(summary_message(summary.text, summary.runs_covered))


def summary_request_messages(
    previous: SummaryState | None, fold: Sequence[EarlierRun], *, words: int, budget: int
) -> tuple[Message, ...]:
    """What the model is asked to summarise: the summary so far and a transcript of
    the runs to fold in, cut to fit ``budget`` tokens when even that is too long."""
    parts: list[str] = []
    if previous is not None:
        parts.append(f"Summary so far:\n{previous.text}\n")
    parts.append("Conversation to add to it:" if previous else "Conversation:")
    for run in fold:
        parts.append(transcript(run))
    text = "\n".join(parts)
    instructions = SUMMARY_INSTRUCTIONS.format(words=words)
    room = (budget - estimate_tokens(instructions) - 2 * MESSAGE_OVERHEAD) * CHARS_PER_TOKEN
    if len(text) > room:
        # Keep the start (the summary so far) and the end (the most recent turns).
        half = max(room // 2 - 40, 0)
        text = f"{text[:half]}\n[... part of the conversation left out ...]\n{text[-half:]}"
    return (Message(role="system", content=instructions), Message(role="user", content=text))


def transcript(run: EarlierRun) -> str:
    """An earlier run as plain lines for the summariser to read."""
    lines = [f"User: {run.input}"]
    for message in run_messages(run, TRANSCRIPT_RESULT_CHARS)[1:]:
        if message.role == "assistant":
            for call in message.tool_calls:
                lines.append(f"Assistant called {call.name}({json.dumps(call.arguments)})")
            if message.content:
                lines.append(f"Assistant: {message.content}")
        elif message.role == "tool":
            lines.append(f"Result of {message.name}: {message.content}")
    return "\n".join(lines)


__all__ = [
    "CHARS_PER_TOKEN",
    "HistoryPlan",
    "bounded",
    "estimate_tokens",
    "input_budget",
    "messages_tokens",
    "plan_history",
    "run_messages",
    "summary_request_messages",
    "tool_message",
]
