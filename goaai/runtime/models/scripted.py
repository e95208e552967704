"""The offline scripted model: deterministic rules that use real tools.

It makes goaai useful with no network and no API key, and it is what the tests
drive. It reads the latest user message and follows the first rule that matches:

============================================  ===================================
the user says                                  the model
============================================  ===================================
``remember my favourite colour is green``      calls ``memory_store`` (session)
``always remember my name is Ada``             calls ``memory_store`` (user scope)
``what is my favourite colour`` /              calls ``memory_recall``; when no
``recall favourite colour``                    fact has that key, ``memory_search``
``what do you know about my dog`` /            calls ``memory_search``: facts about
``search memory for dog``                      it, whatever their keys
``forget my favourite colour``                 calls ``memory_forget``
``calculate 2 * (3 + 4)`` / ``what is 6*7``    calls ``calculator``
``what time is it`` / ``time in Asia/Tokyo``   calls ``clock_now``
``echo hello`` / ``say hello``                 calls ``echo``
``ask me for my name``                         calls ``ask_user``: the run waits
                                               for the answer
``ask me to choose between tea, coffee or``    calls ``ask_user`` offering those
``water`` (``... to choose any of ...``: any   choices (buttons in the chat)
number of them)
``together: echo hi; calculate 6*7; what``     asks for all those calls in one
``time is it`` (two or more of the rules       reply: they run at the same time
above, separated by ``;``)
``forget everything``                          calls ``memory_forget_all``, which
                                               waits for a person's approval
``ask the assistant <question>``               calls ``ask_assistant``: a child
                                               run of the ``assistant`` agent
``call get_current_time {"timezone": "UTC"}``   calls that tool of the agent by name
(``call <tool> <JSON arguments>``; the         with those arguments (any tool, MCP
arguments may be left out)                     and caller's tools included)
``flaky <any of the above>``                   fails the first time it is asked in
                                               this process (the run fails, to try
                                               Retry), then does as asked
``sloppy <any of the above>``                  first sends badly named arguments,
                                               reads the ``invalid_call`` error,
                                               and corrects them
``tell me a story``                            streams a story of about 150 words
                                               at a reading pace (some 9 s), to
                                               watch streaming and try Stop
anything else                                  explains what it can do (an agent
                                               that has ``ask_assistant`` and no
                                               tool for the request delegates it)
============================================  ===================================

Asked to summarise a conversation (goaai's own request when a long session's earlier
runs no longer fit the context), it writes a deterministic summary: the summary so
far, then one line per exchange, the user's words and the answer each cut to a few
words, within the word limit the request names.

Once a tool has answered, the model turns the tool's result into a sentence.
When a call comes back ``invalid_call``, it retries once with the arguments its
rule produces. Replies are streamed word by word to ``on_delta``.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from goaai.runtime.conversation import SUMMARY_INSTRUCTIONS
from goaai.runtime.errors import ModelError
from goaai.runtime.models.base import DeltaCallback, ModelRequest
from goaai.runtime.types import Message, ModelReply, ToolCallRequest, Usage
from goaai.runtime.vocabulary import ErrorKind

_ARITHMETIC = re.compile(r"^[0-9a-z\s.+\-*/%^()\u00d7\u00f7,]+$")
_HAS_OPERATOR = re.compile(
    r"[+\-*/%^\u00d7\u00f7]|\b(sqrt|log|log10|exp|sin|cos|tan|abs|round|floor|ceil)\("
)
_TIME_ZONE = re.compile(r"\bin\s+([A-Za-z_]+(?:/[A-Za-z_+\-]+)+|UTC)\b")
_TRAILING = " ?!.\t\n"

# A story long enough to watch it stream, and to stop it halfway.
STORY = (
    "Once upon a time, in a town where the trams ran on time and the bakers sang, "
    "there lived a small robot called Ada who kept a notebook of everything people "
    "told her. She wrote down favourite colours, birthdays, the names of cats and the "
    "way each neighbour liked their tea. One winter the town's clock stopped, and "
    "nobody could agree on the hour. Ada opened her notebook, added up the minutes "
    "since the baker's first song, asked the tram drivers when they had left the "
    "depot, and worked the time out to the second. The mayor wound the clock, the "
    "trams ran on time again, and the bakers sang a little louder than before. From "
    "then on, whenever someone forgot something, they knocked on Ada's door, and she "
    "would smile, turn a page, and read it back to them, exactly as they had said it. "
    "And that is why, in that town, nobody ever forgets the way you like your tea."
)
STORY_PACE = 0.06

HELP_TEXT = (
    "I'm goaai's offline scripted assistant. I can remember things "
    '("remember my favourite colour is green"), recall them ("what is my favourite '
    'colour?"), forget them, calculate ("calculate 2 * (3 + 4)"), tell the time '
    '("what time is it in Europe/Rome?") and repeat text ("echo hello").'
)


@dataclass(frozen=True)
class Intent:
    """What the user's message asks for: a tool and its arguments, or a plain reply."""

    tool: str = ""
    arguments: dict[str, Any] | None = None
    reply: str = ""
    possessive: bool = False
    # Send the first call with its arguments under a wrong name (to show correction).
    sloppy: bool = False
    # Seconds between streamed words (0: as fast as possible).
    pace: float = 0.0
    # Fail the first time this message is asked in this process (to try Retry).
    flaky: bool = False
    # Several intents whose calls are asked for at once, in one reply.
    together: tuple[Intent, ...] = ()


def _strip_owner(phrase: str) -> tuple[str, bool]:
    """'my favourite colour' -> ('favourite colour', True)."""
    phrase = phrase.strip()
    for prefix in ("my ", "the ", "about "):
        if phrase.lower().startswith(prefix):
            return phrase[len(prefix) :].strip(), prefix == "my "
    return phrase, False


def _is_arithmetic(text: str) -> bool:
    lowered = text.lower()
    return bool(
        _ARITHMETIC.match(lowered) and re.search(r"\d", lowered) and _HAS_OPERATOR.search(lowered)
    )


def understand(text: str) -> Intent:
    """Map a user message to the rule it triggers."""
    # A call by name reads its JSON as written (spaces inside strings kept).
    called = _call_by_name(text.strip())
    if called is not None:
        return called
    message = " ".join(text.strip().split()).rstrip(_TRAILING)
    flaky = re.match(r"^flaky\s+(.+)$", message, re.I)
    if flaky:
        return replace(understand(flaky.group(1)), flaky=True)
    sloppy = re.match(r"^sloppy\s+(.+)$", message, re.I)
    if sloppy:
        inner = understand(sloppy.group(1))
        return Intent(
            tool=inner.tool,
            arguments=inner.arguments,
            reply=inner.reply,
            possessive=inner.possessive,
            sloppy=bool(inner.tool),
        )
    for rule in _RULES:
        intent = rule(message)
        if intent is not None:
            return intent
    return Intent(reply=HELP_TEXT)


# The rules, each given the message (spaces collapsed, no trailing punctuation); the
# first that answers wins.


def _story(message: str) -> Intent | None:
    if re.match(r"^(?:please\s+)?tell me a (?:long )?story\b", message.lower()):
        return Intent(reply=STORY, pace=STORY_PACE)
    return None


def _ask_assistant(message: str) -> Intent | None:
    match = re.match(r"^ask (?:the )?assistant(?: to)?[:,]?\s+(.+)$", message, re.I)
    if match:
        return Intent(tool="ask_assistant", arguments={"prompt": match.group(1)})
    return None


def _call_by_name(message: str) -> Intent | None:
    match = re.match(r"^call\s+([A-Za-z0-9_.:\-]+)(?:\s+(.*))?$", message, re.I | re.S)
    if not match:
        return None
    name, raw = match.group(1), (match.group(2) or "").strip()
    if raw and not raw.startswith("{"):
        return None  # "call me tomorrow" is not a tool call
    if not raw:
        return Intent(tool=name, arguments={})
    try:
        arguments = json.loads(raw)
    except json.JSONDecodeError as error:
        return Intent(reply=f"The arguments for {name} are not JSON ({error.msg}): {raw}")
    if not isinstance(arguments, dict):
        return Intent(reply=f"The arguments for {name} must be a JSON object, not {raw}.")
    return Intent(tool=name, arguments=arguments)


def _together(message: str) -> Intent | None:
    match = re.match(r"^(?:together|at once|in parallel)[:,]?\s+(.+)$", message, re.I)
    if not match:
        return None
    parts = tuple(understand(part) for part in match.group(1).split(";") if part.strip())
    calls = tuple(part for part in parts if part.tool)
    if len(calls) < 2:
        return calls[0] if calls else None
    return Intent(together=calls)


def _choose(message: str) -> Intent | None:
    match = re.match(
        r"^ask me to (?:choose|pick) (between|from|one of|any of|some of)\s+(.+)$", message, re.I
    )
    if not match:
        return None
    choices = [c.strip() for c in re.split(r",|\s+(?:or|and)\s+", match.group(2)) if c.strip()]
    if len(choices) < 2:
        return None
    multiple = match.group(1).lower() in ("any of", "some of")
    question = "Which do you choose? Pick any number." if multiple else "Which one do you choose?"
    return Intent(
        tool="ask_user",
        arguments={"question": question, "choices": choices, "multiple": multiple},
    )


def _ask_user(message: str) -> Intent | None:
    match = re.match(r"^ask me (?:for |about )?(my |the )?(.+)$", message, re.I)
    if match:
        thing = match.group(2).strip()
        return Intent(
            tool="ask_user",
            arguments={"question": f"What is your {thing}?"},
            possessive=True,
        )
    return None


def _forget_all(message: str) -> Intent | None:
    if re.match(r"^forget (?:everything|all)\b", message.lower()):
        return Intent(tool="memory_forget_all", arguments={})
    return None


def _remember(message: str) -> Intent | None:
    match = re.match(r"^(?:please\s+)?(always\s+)?remember(?:\s+that)?\s+(.+)$", message, re.I)
    if not match:
        return None
    scope = "user" if match.group(1) else "session"
    parts = re.split(r"\s+(?:is|are)\s+|\s*[:=]\s*", match.group(2), maxsplit=1)
    if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
        return Intent(
            reply='Tell me what to remember as "remember <something> is <value>", '
            'for example "remember my favourite colour is green".'
        )
    key, possessive = _strip_owner(parts[0])
    return Intent(
        tool="memory_store",
        arguments={"key": key, "value": parts[1].strip(), "scope": scope},
        possessive=possessive,
    )


def _forget(message: str) -> Intent | None:
    match = re.match(r"^forget\s+(.+)$", message, re.I)
    if match:
        key, possessive = _strip_owner(match.group(1))
        return Intent(tool="memory_forget", arguments={"key": key}, possessive=possessive)
    return None


def _calculate(message: str) -> Intent | None:
    match = re.match(r"^(?:calculate|compute|what(?:'s| is))\s+(.+)$", message, re.I)
    if match and _is_arithmetic(match.group(1)):
        return Intent(tool="calculator", arguments={"expression": match.group(1).strip()})
    if _is_arithmetic(message):
        return Intent(tool="calculator", arguments={"expression": message})
    return None


def _clock(message: str) -> Intent | None:
    lowered = message.lower()
    if re.search(
        r"\b(what time|what day|what's the date|what is the date|current time)\b", lowered
    ) or re.match(r"^(time|date|now)\b", lowered):
        zone = _TIME_ZONE.search(message)
        return Intent(tool="clock_now", arguments={"timezone": zone.group(1) if zone else "UTC"})
    return None


def _echo(message: str) -> Intent | None:
    match = re.match(r"^(?:echo|say|repeat)[:\s]\s*(.+)$", message, re.I | re.S)
    if match:
        return Intent(tool="echo", arguments={"text": match.group(1)})
    return None


def _search(message: str) -> Intent | None:
    match = re.match(
        r"^(?:what (?:do|did) you (?:know|remember) about|do you (?:know|remember) "
        r"anything about|search (?:your |my |the )?memory for|look up)\s+(.+)$",
        message,
        re.I,
    )
    if not match:
        return None
    subject, possessive = _strip_owner(match.group(1))
    if subject:
        return Intent(tool="memory_search", arguments={"query": subject}, possessive=possessive)
    return None


def _recall(message: str) -> Intent | None:
    match = re.match(
        r"^(?:what(?:'s| is| are| was)|whats|recall|do you (?:remember|know)|tell me)\s+(.+)$",
        message,
        re.I,
    )
    if not match:
        return None
    key, possessive = _strip_owner(match.group(1))
    if key:
        return Intent(tool="memory_recall", arguments={"key": key}, possessive=possessive)
    return None


# In the order of the table in this module's docstring (a story before a question,
# "forget everything" before "forget <key>", arithmetic before a recall), with calls
# asked for together first and a question with choices before any other question.
_RULES: tuple[Callable[[str], Intent | None], ...] = (
    _together,
    _story,
    _ask_assistant,
    _choose,
    _ask_user,
    _forget_all,
    _remember,
    _forget,
    _calculate,
    _clock,
    _echo,
    _search,
    _recall,
)


def _subject(key: str, possessive: bool) -> str:
    return f"your {key}" if possessive else key


def _clock_sentence(result: dict[str, Any]) -> str:
    # "2026-11-29T14:05:09+00:00" -> "14:05 on Sunday 2026-11-29"
    iso = str(result.get("iso", ""))
    date, _, rest = iso.partition("T")
    return (
        f"It's {rest[:5]} on {result.get('weekday', '')} {date} ({result.get('timezone', 'UTC')})."
    )


def answer(intent: Intent, tool_name: str, outcome: dict[str, Any]) -> str:
    """Turn a tool's answer into the sentence the user reads."""
    if not outcome.get("ok"):
        error = outcome.get("error") or {}
        return f"I couldn't do that: {error.get('message', 'the tool failed')}"
    result = outcome.get("result") or {}
    sentence = _SENTENCES.get(tool_name)
    if sentence is not None:
        return sentence(intent, result)
    if tool_name.startswith("ask_"):
        return f"The {result.get('agent', tool_name[4:])} agent says: {result.get('answer')}"
    return f"{tool_name} answered: {json.dumps(result, ensure_ascii=False, default=str)}"


# What each tool's result becomes, given the intent that called it.


def _stored(intent: Intent, result: dict[str, Any]) -> str:
    where = "in every conversation" if result.get("scope") == "user" else "in this conversation"
    subject = _subject(str(result.get("key", "")), intent.possessive)
    return f"Got it. I'll remember {where} that {subject} is {result.get('value')}."


def _recalled(intent: Intent, result: dict[str, Any]) -> str:
    key = str(result.get("key", ""))
    if not result.get("found"):
        return (
            f"I don't know {_subject(key, intent.possessive)} yet. Tell me with "
            f'"remember {"my " if intent.possessive else ""}{key} is ...".'
        )
    subject = _subject(key, intent.possessive)
    return f"{subject[0].upper()}{subject[1:]} is {result.get('value')}."


def _searched(intent: Intent, result: dict[str, Any]) -> str:
    """What a search found: for "what do you know about ...", or for a recall whose
    key nothing had (then the search looked for the key's words)."""
    facts = [f for f in result.get("facts") or [] if isinstance(f, dict)]
    subject = _subject(str(result.get("query", "")), intent.possessive)
    if intent.tool == "memory_recall" and not facts:
        return _recalled(intent, {"key": result.get("query", ""), "found": False})
    if not facts:
        return f"I don't remember anything about {subject}."
    listed = "; ".join(f"{fact.get('key')}: {fact.get('value')}" for fact in facts[:3])
    if intent.tool == "memory_recall":
        return f"I have nothing under {subject} exactly, but I remember {listed}."
    return f"Here is what I remember about {subject}: {listed}."


def _search_after_missed_recall(
    intent: Intent, last: Message, available: set[str], attempts: int
) -> Intent | None:
    """A recall that found no such key is followed by a search for its words, once."""
    if intent.tool != "memory_recall" or "memory_search" not in available or attempts != 1:
        return None
    outcome = _outcome(last.content)
    result = outcome.get("result") or {}
    if not outcome.get("ok") or not isinstance(result, dict) or result.get("found", True):
        return None
    return Intent(
        tool="memory_search",
        arguments={"query": str(result.get("key", ""))},
        possessive=intent.possessive,
    )


def _forgotten(intent: Intent, result: dict[str, Any]) -> str:
    return f"Done. I've forgotten {_subject(str(result.get('key', '')), intent.possessive)}."


def _calculated(intent: Intent, result: dict[str, Any]) -> str:
    return f"{result.get('expression')} = {result.get('value')}"


def _told_time(intent: Intent, result: dict[str, Any]) -> str:
    return _clock_sentence(result)


def _echoed(intent: Intent, result: dict[str, Any]) -> str:
    return str(result.get("text", ""))


def _answered(intent: Intent, result: dict[str, Any]) -> str:
    if (intent.arguments or {}).get("choices"):
        chosen = result.get("chosen")
        if chosen:
            return f"You chose {_listed([str(c) for c in chosen])}."
        return f"You answered: {result.get('answer')}."
    question = str((intent.arguments or {}).get("question", ""))
    thing = question.removeprefix("What is your ").rstrip("?")
    return f"Thanks! Your {thing} is {result.get('answer')}."


def _listed(items: list[str]) -> str:
    """'tea', 'tea and water', 'tea, coffee and water'."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _forgot_all(intent: Intent, result: dict[str, Any]) -> str:
    forgotten = result.get("forgotten") or []
    if not forgotten:
        return "There was nothing to forget in this conversation."
    return "Done. I've forgotten everything in this conversation: " + ", ".join(forgotten) + "."


_SENTENCES: dict[str, Callable[[Intent, dict[str, Any]], str]] = {
    "memory_store": _stored,
    "memory_recall": _recalled,
    "memory_search": _searched,
    "memory_forget": _forgotten,
    "calculator": _calculated,
    "clock_now": _told_time,
    "echo": _echoed,
    "ask_user": _answered,
    "memory_forget_all": _forgot_all,
}


# The flaky messages that have failed once in this process.
_FAILED_ONCE: set[str] = set()

_SUMMARY_START = SUMMARY_INSTRUCTIONS.split("{", 1)[0]
_SUMMARY_WORDS = re.compile(r"at most (\d+) words")
# How many words of each side of an exchange the scripted summary keeps.
_SUMMARY_WORDS_PER_SIDE = 14


def _is_summary_request(instructions: str) -> bool:
    return instructions.startswith(_SUMMARY_START)


def _summary(instructions: str, conversation: str) -> str:
    """The summary so far, then ``User said ...; the answer was ...`` per exchange,
    oldest first, cut to the word limit the instructions name."""
    limit_match = _SUMMARY_WORDS.search(instructions)
    limit = int(limit_match.group(1)) if limit_match else 200
    previous, _, transcript = conversation.partition("Conversation to add to it:")
    if not transcript:
        previous, transcript = "", conversation.partition("Conversation:")[2]
    lines = [previous.removeprefix("Summary so far:").strip()] if previous.strip() else []
    said = ""
    for line in transcript.splitlines():
        if line.startswith("User: "):
            said = _first_words(line.removeprefix("User: "))
        elif line.startswith("Assistant: ") and said:
            answer = _first_words(line.removeprefix("Assistant: "))
            lines.append(f"User said: {said}; the answer was: {answer}.")
            said = ""
    words = " ".join(lines).split()
    return " ".join(words[:limit])


def _first_words(text: str) -> str:
    words = text.split()
    cut = " ".join(words[:_SUMMARY_WORDS_PER_SIDE])
    return cut + (" ..." if len(words) > _SUMMARY_WORDS_PER_SIDE else "")


def _is_invalid_call(message: Message) -> bool:
    try:
        outcome = json.loads(message.content)
    except ValueError:
        return False
    return bool(
        isinstance(outcome, dict)
        and not outcome.get("ok")
        and (outcome.get("error") or {}).get("kind") == "invalid_call"
    )


def _estimate_tokens(text: str) -> int:
    # About four characters a token, as the providers' own rule of thumb.
    return math.ceil(len(text) / 4) if text else 0


def _stream(text: str, on_delta: DeltaCallback | None, pace: float = 0.0) -> None:
    if on_delta is None:
        return
    for index, piece in enumerate(re.findall(r"\S+\s*", text)):
        if pace and index:
            time.sleep(pace)
        on_delta(piece)


class ScriptedModel:
    """A model client whose answers follow the rules in this module's docstring."""

    name = "scripted"

    def complete(self, request: ModelRequest, on_delta: DeltaCallback | None = None) -> ModelReply:
        messages = request.messages
        if messages and messages[0].role == "system" and _is_summary_request(messages[0].content):
            usage_in = sum(_estimate_tokens(m.content) for m in messages)
            return self._say(_summary(messages[0].content, messages[-1].content), usage_in, None)
        last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
        user_text = messages[last_user].content if last_user >= 0 else ""
        intent = understand(user_text)
        if intent.flaky and user_text not in _FAILED_ONCE:
            _FAILED_ONCE.add(user_text)
            raise ModelError(
                ErrorKind.UNAVAILABLE,
                "The scripted model failed on purpose (a flaky message fails the first time).",
                retryable=False,
            )
        since_user = messages[last_user + 1 :]
        usage_in = sum(_estimate_tokens(m.content) for m in messages)
        available = {spec.name for spec in request.tools}
        if intent.together:
            return self._all_at_once(intent, available, since_user, usage_in, on_delta)
        if intent.tool and intent.tool not in available and "ask_assistant" in available:
            intent = Intent(tool="ask_assistant", arguments={"prompt": user_text})

        attempts = sum(1 for m in since_user if m.role == "assistant" and m.tool_calls)
        tool_results = [m for m in since_user if m.role == "tool"]
        if tool_results:
            if attempts == 1 and _is_invalid_call(tool_results[-1]) and intent.tool in available:
                return self._call(intent, usage_in, attempt=2, sloppy=False)
            search = _search_after_missed_recall(intent, tool_results[-1], available, attempts)
            if search is not None:
                return self._call(search, usage_in, attempt=2, sloppy=False)
            text = self._after_tools(intent, since_user)
            return self._say(text, usage_in, on_delta)
        if intent.tool and intent.tool in available:
            return self._call(intent, usage_in, attempt=1, sloppy=intent.sloppy)
        text = intent.reply or (
            f"I would use the {intent.tool} tool for that, but I don't have it here."
        )
        return self._say(text, usage_in, on_delta, intent.pace)

    def _say(
        self, text: str, usage_in: int, on_delta: DeltaCallback | None, pace: float = 0.0
    ) -> ModelReply:
        _stream(text, on_delta, pace)
        return ModelReply(text=text, usage=Usage(usage_in, _estimate_tokens(text)), model=self.name)

    def _call(self, intent: Intent, usage_in: int, *, attempt: int, sloppy: bool) -> ModelReply:
        arguments = dict(intent.arguments or {})
        if sloppy:
            # The kind of mistake real models make: the right values, the wrong names.
            arguments = {f"{name}_text": value for name, value in arguments.items()} or {
                "unexpected": True
            }
        call = ToolCallRequest(id=f"call_{attempt}", name=intent.tool, arguments=arguments)
        return ModelReply(
            tool_calls=(call,),
            usage=Usage(usage_in, _estimate_tokens(json.dumps(arguments))),
            model=self.name,
        )

    def _all_at_once(
        self,
        intent: Intent,
        available: set[str],
        since_user: tuple[Message, ...],
        usage_in: int,
        on_delta: DeltaCallback | None,
    ) -> ModelReply:
        """Every call of ``intent.together`` in one reply; once all have answered,
        a sentence for each, in the order they were asked for."""
        parts = [part for part in intent.together if part.tool in available]
        if not parts:
            return self._say(HELP_TEXT, usage_in, on_delta)
        results = {m.tool_call_id: m for m in since_user if m.role == "tool"}
        if not results:
            calls = tuple(
                ToolCallRequest(
                    id=f"call_{n}", name=part.tool, arguments=dict(part.arguments or {})
                )
                for n, part in enumerate(parts, 1)
            )
            arguments = json.dumps([call.arguments for call in calls])
            return ModelReply(
                tool_calls=calls,
                usage=Usage(usage_in, _estimate_tokens(arguments)),
                model=self.name,
            )
        sentences = []
        for n, part in enumerate(parts, 1):
            message = results.get(f"call_{n}")
            outcome = _outcome(message.content) if message else {"ok": False, "error": {}}
            sentences.append(answer(part, part.tool, outcome))
        return self._say(" ".join(sentences), usage_in, on_delta)

    def _after_tools(self, intent: Intent, since_user: tuple[Message, ...]) -> str:
        calls = {c.id: c for m in since_user if m.role == "assistant" for c in m.tool_calls}
        # Only the last answer counts: an earlier one was corrected.
        message = [m for m in since_user if m.role == "tool"][-1]
        call = calls.get(message.tool_call_id)
        return answer(intent, call.name if call else message.name, _outcome(message.content))


def _outcome(content: str) -> dict[str, Any]:
    """A tool message's outcome, as the loop wrote it (or its text, if it is not JSON)."""
    try:
        outcome = json.loads(content)
    except ValueError:
        return {"ok": False, "error": {"message": content}}
    return outcome if isinstance(outcome, dict) else {"ok": True, "result": outcome}
