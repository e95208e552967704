"""The per-step writes of the turn loop: JSON values, driver errors, their own
transactions, and leases that cannot be taken from a live worker."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.db import connection, connections, transaction
from django.utils import timezone

from goaai.runtime.errors import IllegalTransition
from runs_app import services
from runs_app.models import Run, ToolCall
from sessions_app.eventlog import event_append, recording
from sessions_app.models import RunEvent, Session
from tests.factories import SessionFactory

pytestmark = pytest.mark.django_db(transaction=True)


class Boom(Exception):
    pass


def _running_turn():
    session = SessionFactory()
    run = services.run_create(session_id=session.id, agent="assistant", input="hi")
    services.run_claim(run_id=run.id, owner="w1", lease_seconds=60)
    turn = services.turn_start(run_id=run.id, index=0, model="m", request_messages=[])
    return session, run, turn


def _seqs(session):
    return list(
        RunEvent.objects.filter(session=session).order_by("seq").values_list("seq", flat=True)
    )


@pytest.mark.parametrize("result", ["hello", "123", 42, 3.5, True, None, [1, "a"], {"k": 1}])
def test_a_tool_result_of_any_json_type_is_stored_as_it_was(result):
    _, _, turn = _running_turn()
    call = services.tool_call_start(turn_id=turn.id, index=0, call_id="c", name="t", arguments={})

    services.tool_call_finish(tool_call_id=call.id, result=result)

    stored = ToolCall.objects.get(pk=call.id)
    assert stored.status == "succeeded"
    assert stored.result == result
    assert type(stored.result) is type(result)


def test_a_second_turn_with_the_same_index_is_refused_cleanly():
    session, run, _ = _running_turn()
    before = _seqs(session)

    with pytest.raises(IllegalTransition, match="already at turn 0"):
        services.turn_start(run_id=run.id, index=0, model="m", request_messages=[])

    assert _seqs(session) == before


def test_a_failed_step_rolls_back_and_leaves_the_connection_usable():
    session = SessionFactory()
    before = Session.objects.get(pk=session.id).last_event_seq

    def a_step_that_fails_half_way():
        with recording(session.id, expect=3) as batch:
            batch.add("policy.decision", {})
            raise Boom

    with pytest.raises(Boom):
        a_step_that_fails_half_way()

    assert Session.objects.get(pk=session.id).last_event_seq == before
    assert not connection.in_atomic_block
    assert connection.get_autocommit()
    with transaction.atomic():
        event_append(session_id=session.id, type="policy.decision", data={})
    services.run_create(session_id=session.id, agent="assistant", input="x")
    seqs = _seqs(session)
    assert seqs == list(range(1, len(seqs) + 1))
    assert Session.objects.get(pk=session.id).last_event_seq == len(seqs)


@pytest.mark.postgres
def test_a_takeover_cannot_take_a_lease_its_holder_has_just_renewed(monkeypatch):
    session = SessionFactory()
    run = services.run_create(session_id=session.id, agent="assistant", input="hi")
    assert services.run_claim(run_id=run.id, owner="A", lease_seconds=60)
    # A's renewal is late: the lease has lapsed when B comes to claim the run...
    Run.objects.filter(pk=run.id).update(lease_expires_at=timezone.now() - dt.timedelta(seconds=1))
    seen_expired = services._lease_live
    renewed: dict[str, bool] = {}

    def a_renews_right_after_b_looked(row):
        live = seen_expired(row)

        def keeper():
            renewed["A"] = services.run_renew_lease(run_id=run.id, owner="A", lease_seconds=60)
            connections.close_all()

        worker = threading.Thread(target=keeper)
        worker.start()
        worker.join(10)
        return live

    # ...and A's keeper renews between B's look and B's takeover.
    monkeypatch.setattr(services, "_lease_live", a_renews_right_after_b_looked)
    claim_b = services.run_claim(run_id=run.id, owner="B", lease_seconds=60)

    assert renewed == {"A": True}
    assert claim_b is None
    assert Run.objects.get(pk=run.id).lease_owner == "A"
