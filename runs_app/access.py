"""Who may read and act on runs, their turns and tool calls (the rule is
goaai.access: one's own, or the model's permission).

A run belongs to its session's owner, who may do anything with it. Anyone else
needs, for another user's run: ``runs_app.view_run``, ``runs_app.view_turn`` and
``runs_app.view_toolcall`` to read the run, its turns and its tool calls;
``runs_app.cancel_run`` to cancel it; ``runs_app.respond_run`` to approve or deny
the tool call it waits on or answer its question; ``runs_app.add_run`` to post a
message (start a run) in another user's session; ``runs_app.add_score`` to score
it. A score (other than a user's feedback) is its author's to change or delete;
anyone else needs ``runs_app.change_score`` or ``runs_app.delete_score``.

A timeline or an export shows a whole record at once, so it needs every permission
the record's parts need: a run's record is the run with its turns, tool calls and
events; a session's is the session and its runs' records, and its export adds the
session's memory.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Model

from goaai.access import allowed, has_permission
from goaai.runtime.vocabulary import ScoreSource
from memory_app.models import MemoryEntry
from runs_app.models import Run, Score, ToolCall, Turn
from sessions_app.models import RunEvent, Session
from sessions_app.selectors import session_owner_and_agent

RUN_RECORD: tuple[type[Model], ...] = (Run, Turn, ToolCall, RunEvent)
SESSION_RECORD: tuple[type[Model], ...] = (Session, *RUN_RECORD)
SESSION_EXPORT: tuple[type[Model], ...] = (*SESSION_RECORD, MemoryEntry)
# A dataset of scored runs holds each run with its tool calls and scores.
DATASET_RECORD: tuple[type[Model], ...] = (Run, Turn, ToolCall, Score)


def run_owner_id(run: Run) -> int | None:
    """The user a run belongs to: its session's owner (fixed for the session's life;
    read from the session when it came with the run)."""
    if Run.session.is_cached(run):
        return run.session.owner_id
    known = session_owner_and_agent(run.session_id)
    return known[0] if known is not None else None


def can(user: Any, action: str, run: Run) -> bool:
    """Whether ``user`` may take ``action`` (``view``, ``cancel``, ``respond``) on
    ``run``."""
    return allowed(user, Run, action, run_owner_id(run))


def _reads_all(user: Any, models: tuple[type[Model], ...], owner_id: int | None) -> bool:
    return all(allowed(user, model, "view", owner_id) for model in models)


def can_read_run_record(user: Any, run: Run) -> bool:
    """Whether ``user`` may read ``run`` with its turns, tool calls and events."""
    return _reads_all(user, RUN_RECORD, run_owner_id(run))


def can_read_session_record(user: Any, session: Session, *, with_memory: bool = False) -> bool:
    """Whether ``user`` may read ``session`` with every run's record (and its
    memory, ``with_memory``: what its export holds)."""
    return _reads_all(user, SESSION_EXPORT if with_memory else SESSION_RECORD, session.owner_id)


def may_read_every_record(user: Any, models: tuple[type[Model], ...]) -> bool:
    """Whether ``user`` may read every user's rows of all ``models`` (the admin's
    exports of selected rows)."""
    return all(has_permission(user, model, "view") for model in models)


def may_act_on_every_run(user: Any, action: str) -> bool:
    """Whether ``user`` may take ``action`` on every user's runs (the admin's bulk
    actions)."""
    return has_permission(user, Run, action)


def can_read_row(user: Any, row: Model) -> bool:
    """Whether ``user`` may read one turn, tool call, event or run (the timeline's
    values, loaded one at a time)."""
    if isinstance(row, Turn):
        owner = session_owner_and_agent(row.run.session_id)
    elif isinstance(row, Run | ToolCall | RunEvent):
        owner = session_owner_and_agent(row.session_id)
    else:
        return False
    return allowed(user, row, "view", owner[0] if owner is not None else None)


def canceled_by(user: Any, reason: str = "") -> str:
    """A cancel reason that names who asked, kept on the run and in its
    ``run.canceled`` event (the name first: a reason is cut at 200 characters)."""
    by = f"canceled by {user.get_username()} (user {user.pk})"
    return f"{by}: {reason}" if reason else by


def may_score(user: Any, run: Run) -> bool:
    """Whether ``user`` may add a score to ``run``: their own, or anyone's with
    ``runs_app.add_score``."""
    return allowed(user, Score, "add", run_owner_id(run))


def may_edit_score(user: Any, score: Score, action: str) -> bool:
    """Whether ``user`` may ``change`` or ``delete`` ``score``: one they gave, or
    anyone's with the permission; never a user's feedback, which its user changes
    through the feedback endpoint."""
    if score.source == ScoreSource.FEEDBACK:
        return False
    return allowed(user, Score, action, score.author_id)
