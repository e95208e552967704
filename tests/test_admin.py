"""The admin: every page renders for staff, nothing for anyone else, and audit records
stay read-only."""

from __future__ import annotations

import pytest
from django.urls import reverse

from memory_app.models import MemoryEntry, MemoryRevision
from memory_app.services import memory_store
from runs_app.models import Run, ToolCall, Turn
from sessions_app.eventlog import event_append
from sessions_app.models import ApiToken, RunEvent, Session
from sessions_app.services import api_token_create
from tests.factories import SessionFactory, ToolCallFactory

MODELS = [Session, Run, Turn, ToolCall, RunEvent, MemoryEntry, MemoryRevision, ApiToken]
# Memory entries are editable by staff (through the services); see tests/admin.
READ_ONLY = [Run, Turn, ToolCall, RunEvent, MemoryRevision, ApiToken]


def _changelist(model) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")


def _change(obj) -> str:
    meta = obj._meta
    return reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[obj.pk])


def _add(model) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_add")


@pytest.fixture
def records(owner):
    call = ToolCallFactory(turn__run__session__owner=owner)
    session = call.session
    event_append(session_id=session.id, type="session.updated", data={"title": "x"})
    memory_store(key="colour", value="green", scope="session", session_id=session.id)
    return {
        Session: session,
        Run: call.run,
        Turn: call.turn,
        ToolCall: call,
        RunEvent: RunEvent.objects.filter(session=session).first(),
        MemoryEntry: MemoryEntry.objects.get(session=session),
        MemoryRevision: MemoryRevision.objects.get(session=session),
        ApiToken: api_token_create(user_id=owner.pk, name="ci")[0],
    }


@pytest.mark.django_db
@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_staff_sees_every_changelist_and_change_page(client, staff, records, model):
    client.force_login(staff)
    page = client.get(_changelist(model))
    assert page.status_code == 200
    detail = client.get(_change(records[model]))
    assert detail.status_code == 200


@pytest.mark.django_db
@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_non_staff_is_sent_to_login(client, other_user, records, model):
    client.force_login(other_user)
    for url in (_changelist(model), _change(records[model])):
        response = client.get(url)
        assert response.status_code == 302
        assert "/admin/login/" in response["Location"]


@pytest.mark.django_db
@pytest.mark.parametrize("model", READ_ONLY, ids=lambda m: m.__name__)
def test_audit_records_cannot_be_added_changed_or_deleted(client, staff, records, model):
    client.force_login(staff)
    obj = records[model]
    before = model.objects.count()
    assert client.get(_add(model)).status_code == 403
    delete_url = _change(obj).replace("/change/", "/delete/")
    assert client.post(delete_url, {"post": "yes"}).status_code == 403
    # A POST to the change page is refused and nothing changes.
    assert client.post(_change(obj), {}).status_code == 403
    assert model.objects.count() == before


@pytest.mark.django_db
def test_run_changelist_query_count_does_not_grow_with_rows(
    client, staff, django_assert_max_num_queries
):
    client.force_login(staff)
    session = SessionFactory()
    ToolCallFactory(turn__run__session=session)
    with django_assert_max_num_queries(12) as few:
        client.get(_changelist(Run))
    for _ in range(15):
        ToolCallFactory(turn__run__session=session)
    with django_assert_max_num_queries(len(few.captured_queries)):
        assert client.get(_changelist(Run)).status_code == 200
