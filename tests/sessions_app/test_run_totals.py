"""What a page of sessions' runs add up to (``sessions_add_run_totals``): the
figures the correlated subqueries of ``sessions_with_usage`` give, for a page of
any size, in one statement up to the API's largest page."""

from __future__ import annotations

from decimal import Decimal

import pytest

from sessions_app.models import Session
from sessions_app.selectors import RUN_TOTALS, sessions_add_run_totals, sessions_with_usage
from tests.factories import RunFactory, SessionFactory
from tests.statement_tally import tallying

pytestmark = pytest.mark.django_db


@pytest.fixture
def sessions(owner):
    made = SessionFactory.create_batch(201, owner=owner)
    for n, session in enumerate(made[::7]):
        for k in range(n % 3 + 1):
            RunFactory(
                session=session,
                status="completed",
                input_tokens=10 * n + k,
                output_tokens=n + 2 * k,
                total_tokens=11 * n + 3 * k,
                cost=Decimal("0.0001") * (n + k),
                unpriced_turns=k,
            )
    return made


@pytest.mark.parametrize(
    ("size", "statements"), [(1, 1), (2, 1), (50, 1), (51, 1), (200, 1), (201, 2)]
)
def test_a_page_gets_the_figures_of_the_subqueries(sessions, size, statements):
    page = list(Session.objects.filter(pk__in=[s.pk for s in sessions[:size]]))
    with tallying() as tally:
        sessions_add_run_totals(page)
    assert tally.statements == statements
    expected = {
        s.pk: s for s in sessions_with_usage(Session.objects.filter(pk__in=[s.pk for s in page]))
    }
    assert len(expected) == size
    for session in page:
        for name in RUN_TOTALS:
            got, want = (
                getattr(session, f"runs_{name}"),
                getattr(expected[session.pk], f"runs_{name}"),
            )
            assert got == want, (name, session.pk)
    assert any(s.runs_total_tokens for s in page) == (size >= 8)


def test_an_empty_page_reads_nothing():
    with tallying() as tally:
        sessions_add_run_totals([])
    assert tally.statements == 0
