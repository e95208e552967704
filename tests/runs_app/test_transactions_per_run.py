"""What a scripted run costs the database, pinned: its transactions and statements,
counted on every connection of the process (the caller's, the executor's worker
thread's, the tool's thread's), on both in-process executors.

A run of one tool call is seven steps: created, claimed (with what it starts
from), its first turn started, the model's reply recorded with the call it asks
for, the call ended, the second turn started, the answer recorded with the run's
end. A tool that reads or writes memory adds its own. The checks for a cancel
request between steps ride on the step before (``RunStore.complete_turn``); the
caller of ``rt.run`` gets the run as its worker left it. ``bench/transactions.py``
measures the same, with a real Celery worker too."""

from __future__ import annotations

import pytest
from django.db import connection

from goaai.runtime import rt
from goaai.runtime.vocabulary import RunStatus
from tests.statement_tally import tallying

pytestmark = pytest.mark.django_db(transaction=True)

REMEMBER = "remember my favourite colour is green"
RECALL = "what is my favourite colour?"
CALCULATE = "calculate 2 * (3 + 4)"

TRANSACTIONS = {REMEMBER: 8, RECALL: 8, CALCULATE: 7}
STATEMENTS = {
    "sqlite": {REMEMBER: 50, RECALL: 47, CALCULATE: 43},
    # Django writes some statements differently for each database: each is pinned.
    "postgresql": {REMEMBER: 46, RECALL: 44, CALCULATE: 40},
}


@pytest.fixture(params=["inline", "thread"])
def runtime(request):
    rt.reset()
    rt.configure(executor=request.param)
    yield rt
    rt.reset()


def test_a_scripted_run_takes_at_most_eight_transactions(runtime, owner):
    def run(prompt: str, session) -> tuple[int, int]:
        with tallying() as tally:
            done = runtime.run("assistant", prompt, session=session)
        assert done.status == RunStatus.COMPLETED, done
        return tally.transactions, tally.statements

    # The first run of the agent records its version; later ones find it.
    run(CALCULATE, runtime.create_session(owner=owner).id)

    remembered = runtime.create_session(owner=owner).id
    costs = {
        REMEMBER: run(REMEMBER, remembered),
        RECALL: run(RECALL, remembered),
        CALCULATE: run(CALCULATE, runtime.create_session(owner=owner).id),
    }

    expected = STATEMENTS[connection.vendor]
    assert costs == {prompt: (TRANSACTIONS[prompt], expected[prompt]) for prompt in costs}
    assert max(transactions for transactions, _ in costs.values()) <= 8
