"""Synthetic conversations in bulk, for demos and for measuring the admin at scale.

Every run has ``turns_per_run`` turns: each turn but the last asks for
``calls_per_turn`` tool calls, and the last one answers (or is where a failed or
canceled run stopped). So the data set has sessions * runs * (turns - 1) * calls
tool calls exactly. A run awaiting input stops at the approval its last tool call
waits for, one turn short.

The rows are what the runtime would have written: sessions owned by ``demo-user-N``
users, runs mostly completed with some failed (with an error kind), canceled or
awaiting input, labelled ``tier: free|paid``; turns with the messages the turn loop
would have sent (the agent's instructions, the session's earlier exchanges, the
question, then each tool call and its answer as ``ToolOutcome.for_model`` gives it)
and the model's replies; tool calls of the agents' tools with arguments, results,
errors and durations; the session's event log numbered 1..n in the order a run
writes it, every event built by ``goaai.runtime.payloads`` as the services build it
(``last_event_seq`` set to match); session memory written by ``memory_store`` calls,
with its revisions. Timestamps are spread over the past ``days`` days.

It writes through ``goaai.sql.bulk_load`` (``COPY`` on PostgreSQL, ``executemany``
on SQLite), one transaction per chunk of sessions (about 20,000 tool calls),
without going through the services: it makes history, it does not run agents. On
PostgreSQL a million tool calls with their 6.6 million events take 6.5 minutes on
a quiet 2-core machine (13 on a busy one), the database's index maintenance being
most of it.

The modules: ``plan`` (how much, and the odds), ``seeder`` (the data set, a chunk
of sessions per transaction), ``sessions`` (one session), ``runs`` (one run),
``outcomes`` (what a tool call is asked and returns), ``memory`` (session memory),
``log`` (a session's event log) and ``tables`` (rows buffered per model).
"""

from runs_app.seeding.plan import Plan, RunShape, SessionShape
from runs_app.seeding.seeder import Seeder

__all__ = ["Plan", "RunShape", "Seeder", "SessionShape"]
