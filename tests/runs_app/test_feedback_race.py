"""Two clicks at the same moment: one person's feedback on a run stays one score,
whichever of the two is recorded last (PostgreSQL: truly concurrent writers)."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from runs_app.models import Score
from runs_app.scores import Thumb, feedback_give
from tests.factories import RunFactory, SessionFactory

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("attempt", range(3))
def test_two_thumbs_at_once_leave_one_score(owner, attempt):
    run = RunFactory(session=SessionFactory(owner=owner), status="completed")
    start = threading.Barrier(2)
    failures: list[BaseException] = []

    def give(thumb: Thumb) -> None:
        try:
            start.wait(timeout=10)
            feedback_give(run_id=run.pk, user_id=owner.pk, thumb=thumb)
        except BaseException as error:  # reported by the test
            failures.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=give, args=(thumb,)) for thumb in Thumb]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert failures == []
    (score,) = Score.objects.filter(run=run)
    assert score.value in (0.0, 1.0)
