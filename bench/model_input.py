"""Building a run's model input: a session of 1,000 runs with 10,000 remembered facts
against one of 10 runs with 100 facts.

    .venv/bin/python bench/model_input.py [--db sqlite|postgres|both] [--repeat N]

What is timed is everything a new run reads and computes before its first model
request: its context as the database store reads it (the branch back to the latest
history summary, with every turn and tool call of those runs; the remembered facts
ranked for its message) and the loop's first messages (history fitted to the agent's
budget, tool results bounded). Both sessions are seeded as a long conversation
leaves them: every run with a turn that called ``echo`` with a result of about 1,500
characters and a turn that answered, and in the long one a history summary every 8
runs, as the loop writes them when the runs since the last one stop fitting.

Target: the long session within 1.5x the short one (its cost must not grow with the
session's length or the size of its memory).
"""

from __future__ import annotations

import sys
import uuid
from dataclasses import replace

from _common import arguments, median, per_call, run_each_database, setup_django

RESULT = "a long tool result line " * 64  # about 1,500 characters
SUMMARY_EVERY = 8


def seed(owner, *, runs: int, facts: int):
    """A session of ``runs`` finished runs and ``facts`` facts remembered for its
    user; returns the session and a pending run that continues it."""
    from django.utils import timezone

    from memory_app.services import memory_store
    from runs_app.models import HistorySummary, Run, ToolCall, Turn
    from sessions_app.models import Session

    session = Session.objects.create(owner=owner, agent="bench", title=f"{runs} runs")
    now = timezone.now()
    previous = None
    rows: list[Run] = []
    for index in range(runs):
        run = Run(
            id=uuid.uuid4(),
            session=session,
            agent="bench",
            input=f"echo fact number {index}",
            output=RESULT[:200],
            status="completed",
            previous_run_id=previous,
            started_at=now,
            ended_at=now,
        )
        rows.append(run)
        previous = run.id
    Run.objects.bulk_create(rows, batch_size=500)
    turns, calls, summaries = [], [], []
    summary_before = None
    for index, run in enumerate(rows):
        calling = Turn(
            id=uuid.uuid4(),
            run=run,
            index=0,
            model="scripted",
            response_tool_calls=[{"id": "call_1", "name": "echo", "arguments": {"text": "x"}}],
            output_tokens=12,
            ended_at=now,
        )
        answering = Turn(
            id=uuid.uuid4(),
            run=run,
            index=1,
            model="scripted",
            response_text=run.output,
            output_tokens=50,
            ended_at=now,
        )
        turns += [calling, answering]
        calls.append(
            ToolCall(
                run=run,
                turn=calling,
                session=session,
                call_id="call_1",
                index=0,
                name="echo",
                arguments={"text": "x"},
                result={"text": RESULT},
                status="succeeded",
            )
        )
        if runs > 10 and index % SUMMARY_EVERY == SUMMARY_EVERY - 1 and index < runs - 3:
            summary = HistorySummary(
                id=uuid.uuid4(),
                session=session,
                run=rows[min(index + 1, runs - 1)],
                through_run=run,
                previous_id=summary_before,
                runs_covered=index + 1,
                text="User said: echo fact number ...; the answer was: a long tool result. " * 8,
                model="scripted",
            )
            summaries.append(summary)
            summary_before = summary.id
    Turn.objects.bulk_create(turns, batch_size=1000)
    ToolCall.objects.bulk_create(calls, batch_size=1000)
    HistorySummary.objects.bulk_create(summaries, batch_size=500)
    # Through the service that keeps the memory's search index, as goaai writes them.
    for index in range(facts):
        memory_store(
            key=f"fact {index}",
            value=f"the user's fact number {index} is about topic {index % 97}",
            scope="user",
            user_id=owner.pk,
        )
    pending = Run.objects.create(
        session=session,
        agent="bench",
        input="what is fact number 3?",
        previous_run_id=previous,
        started_at=now,
    )
    return session, pending


def main() -> None:
    parser = arguments(__doc__ or "")
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    if run_each_database(__file__, args, ["--repeat", str(args.repeat)]):
        return
    setup_django(args.db, args.postgres)
    from django.contrib.auth import get_user_model

    from goaai.runtime.agents import ASSISTANT
    from goaai.runtime.loop import TurnLoop, _Progress
    from goaai.runtime.models.base import ToolSpec
    from goaai.runtime.models.scripted import ScriptedModel
    from goaai.runtime.tools import tools_for
    from runs_app.services import Claim
    from runs_app.store import OrmRunStore

    users = get_user_model()
    agent = replace(ASSISTANT, id="bench")
    store = OrmRunStore()
    loop = TurnLoop(store=store, agents=None, model_factory=lambda name: ScriptedModel())  # type: ignore[arg-type]
    specs = tuple(
        ToolSpec(t.name, t.description, t.json_schema()) for t in tools_for(agent.toolsets).values()
    )
    cases = {}
    for runs, facts in ((10, 100), (1_000, 10_000)):
        owner = users.objects.create(username=f"bench{runs}")
        _, pending = seed(owner, runs=runs, facts=facts)
        claim = Claim(run=pending, fresh=True, owner_id=owner.pk)

        def build(claim=claim):
            context = store._context(claim, "bench")
            progress = _Progress(started=0.0)
            return loop._initial_messages(agent, context, ScriptedModel(), specs, progress)

        messages = build()
        cases[(runs, facts)] = (build, len(messages))
    print(f"\n== model input, {args.db}, {args.repeat} builds each ==")
    timings: dict[tuple[int, int], list[float]] = {key: [] for key in cases}
    for _ in range(10):  # alternating rounds: a shared machine's drift hits both
        for key, (build, _) in cases.items():
            timings[key].extend(per_call(build, max(1, args.repeat // 10)))
    for (runs, facts), values in timings.items():
        print(
            f"{runs:5} runs, {facts:6} facts: median {median(values) * 1e3:7.2f} ms "
            f"({cases[(runs, facts)][1]} messages)"
        )
    ratio = median(timings[(1_000, 10_000)]) / median(timings[(10, 100)])
    print(f"long / short                   {ratio:6.2f}x  (target <= 1.5)")


if __name__ == "__main__":
    sys.exit(main())
