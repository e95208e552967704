"""How a client that resends the whole conversation finds its session again.

OpenAI's chat API is stateless: a chat front-end sends every message of the
conversation with each request. goaai keeps the conversation itself (a session),
so it recognises the conversation a request continues:

- the conversation is read as its user and assistant messages, in order, each as
  (role, text with surrounding blanks removed); system messages (instructions, which
  front-ends often rewrite on each request), tool messages and the assistant
  messages that only call tools are left out;
- each run started through ``/v1/`` records a digest of that conversation up to and
  including its own message (``Run.conversation_digest``), a chain of SHA-256 over
  the messages and the agent, so that every prefix has a digest of its own;
- a request whose messages before its last user message are a recorded run's
  conversation followed by that run's answer continues the run's session (one
  indexed lookup, scoped to the caller and the agent, no scan). Matched to a run
  that is no longer the newest of its session (the client regenerated or edited
  its last message), the new run branches off it, as a redo in the chat does;
- anything else (a new conversation, or an earlier message edited) starts a new
  session; the messages before the new one are given to its runs as context.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from goaai.runtime.vocabulary import RunStatus, SessionStatus
from runs_app.models import Run
from runs_app.selectors import session_head
from sessions_app.models import Session

# How many runs with the same digest (the same conversation, told twice) are
# compared with the answer the client shows.
CANDIDATES = 10


class Said(NamedTuple):
    """One message of the conversation as the digest reads it."""

    role: str  # "user" or "assistant"
    text: str


def said(role: str, text: str, *, calls_tools: bool = False) -> Said | None:
    """A message as the conversation counts it, or ``None`` if it does not count."""
    text = text.strip()
    if role == "user" or (role == "assistant" and text and not calls_tools):
        return Said(role, text)
    return None


def digests(agent: str, conversation: Sequence[Said]) -> list[str]:
    """The digest of every prefix of ``conversation``: ``[k]`` covers its first
    ``k + 1`` messages."""
    state = hashlib.sha256(f"goaai-conversation\x00{agent}".encode()).digest()
    out = []
    for message in conversation:
        state = hashlib.sha256(
            state + b"\x00" + message.role.encode() + b"\x00" + message.text.encode()
        ).digest()
        out.append(state.hex())
    return out


def digest(agent: str, conversation: Sequence[Said]) -> str:
    """The digest a run records: the conversation up to and including its message."""
    return digests(agent, conversation)[-1]


@dataclass(frozen=True)
class Match:
    """The recorded run a request continues, and what it means for the new run."""

    run: Run
    # The run to branch off, when the matched run is not the newest of its session.
    branch_from: Run | None
    # The client's messages before the session's first recorded exchange.
    prelude: list[Said]


def find(*, owner_id: int, agent: str, earlier: Sequence[Said]) -> Match | None:
    """The exchange ``earlier`` (the client's messages before its new one) ends with:
    a completed run of the caller's, of ``agent``, in an active session, whose
    conversation is ``earlier`` less its last message and whose answer is that last
    message; ``None`` if there is none."""
    if len(earlier) < 2 or earlier[-1].role != "assistant":
        return None
    prefixes = digests(agent, earlier)
    answer = earlier[-1].text
    candidates = (
        Run.objects.filter(
            conversation_digest=prefixes[-2],
            agent=agent,
            session__owner_id=owner_id,
            session__status=SessionStatus.ACTIVE,
            parent_run__isnull=True,
            status=RunStatus.COMPLETED,
        )
        .select_related("session")
        .order_by("-created_at")[:CANDIDATES]
    )
    for run in candidates:
        output = run.output.strip()
        # The client shows the run's answer, maybe after what the run said before
        # its last turn (the text of turns that called tools comes first).
        if output and answer.endswith(output):
            head = session_head(run.session_id)
            return Match(
                run=run,
                branch_from=None if head == run.pk else run,
                prelude=_prelude(run.session, prefixes, earlier),
            )
    return None


def _prelude(session: Session, prefixes: list[str], earlier: Sequence[Said]) -> list[Said]:
    """The client's messages before the session's first exchange through ``/v1/``
    (context the client had before goaai recorded the conversation)."""
    first = (
        Run.objects.filter(session=session, parent_run__isnull=True)
        .exclude(conversation_digest="")
        .order_by("created_at")
        .values_list("conversation_digest", flat=True)
        .first()
    )
    if first is None or first not in prefixes:
        return []
    return list(earlier[: prefixes.index(first)])


def transcript(prelude: Sequence[Said]) -> str:
    """Earlier messages that no recorded run holds, as instructions the run reads."""
    if not prelude:
        return ""
    lines = "\n".join(f"{message.role}: {message.text}" for message in prelude)
    return f"The conversation before this session, as the user's client sent it:\n{lines}"
