"""Model serializers build their fields once per class and give each instance its
own copies, and write times in UTC as DRF does; filter sets make their form class
once per class; detail routes find their row by id alone."""

import datetime as dt
import zoneinfo
from decimal import Decimal

import pytest
from django.http import QueryDict
from django.utils import timezone
from rest_framework import serializers
from rest_framework.renderers import JSONRenderer

from goaai.api.serializing import UtcDateTimeField
from memory_app.api.filters import MemoryFilter
from runs_app.api.filters import RunFilter
from runs_app.api.serializers import RunDetailSerializer, RunSerializer
from sessions_app.api.filters import SessionFilter
from sessions_app.api.serializers import SessionSerializer
from sessions_app.models import Session
from sessions_app.selectors import sessions_add_run_totals
from tests.factories import RunFactory, SessionFactory


def test_each_instance_has_fields_of_its_own():
    first, second = RunDetailSerializer(), RunDetailSerializer()
    assert first.fields.keys() == second.fields.keys()
    for name in first.fields:
        assert first.fields[name] is not second.fields[name]
        assert first.fields[name].parent is first
        assert second.fields[name].parent is second
    # A nested serializer's own fields are bound to its copy, not shared.
    first_turns, second_turns = first.fields["turns"].child, second.fields["turns"].child
    assert first_turns is not second_turns
    assert first_turns.fields["tool_calls"].child is not second_turns.fields["tool_calls"].child


def test_a_subclass_builds_fields_of_its_own():
    assert "turns" in RunDetailSerializer().fields
    assert "turns" not in RunSerializer().fields
    assert "turns" in RunDetailSerializer().fields


@pytest.mark.django_db
def test_a_run_is_found_by_its_id_whatever_the_list_filters_say(api, owner):
    run = RunFactory(session=SessionFactory(owner=owner), status="failed")
    response = api.get(f"/api/v1/runs/{run.pk}/?status=completed&created_after=nonsense")
    assert response.status_code == 200
    assert response.json()["id"] == str(run.pk)


@pytest.mark.parametrize(
    "moment",
    [
        dt.datetime(2026, 12, 4, 21, 5, 7, 123456, tzinfo=dt.UTC),
        dt.datetime(2026, 12, 4, 22, 5, 7, tzinfo=zoneinfo.ZoneInfo("Europe/Paris")),
        dt.datetime(1, 1, 1, tzinfo=dt.UTC),
    ],
)
def test_times_are_written_as_drf_writes_them_in_the_apis_zone(moment):
    drf = serializers.DateTimeField()
    with timezone.override(dt.UTC):
        expected = drf.to_representation(moment)
    assert UtcDateTimeField().to_representation(moment) == expected
    assert expected.endswith("Z")
    # Whatever zone a request made current, the API writes UTC.
    with timezone.override(zoneinfo.ZoneInfo("Asia/Tokyo")):
        assert UtcDateTimeField().to_representation(moment) == expected


def test_the_model_serializers_write_their_times_with_the_utc_field():
    fields = RunDetailSerializer().fields
    assert isinstance(fields["created_at"], UtcDateTimeField)
    assert isinstance(fields["turns"].child.fields["started_at"], UtcDateTimeField)


@pytest.mark.django_db
def test_a_filter_set_makes_its_form_class_once_and_each_form_its_own_fields():
    first = SessionFilter(QueryDict("status=active"))
    second = SessionFilter(QueryDict("status=ended"))
    assert first.get_form_class() is second.get_form_class()
    assert first.form is not second.form
    assert first.form.fields["status"] is not second.form.fields["status"]
    assert first.is_valid()
    assert second.is_valid()
    assert first.form.cleaned_data["status"] == "active"
    assert second.form.cleaned_data["status"] == "ended"
    # Each class has its own.
    forms = {SessionFilter().get_form_class(), RunFilter().get_form_class()}
    forms.add(MemoryFilter().get_form_class())
    assert len(forms) == 3
    assert "expired" in MemoryFilter().form.fields
    assert "expired" not in RunFilter().form.fields


@pytest.mark.django_db
def test_a_session_is_written_as_drfs_fields_would_write_it(owner):
    plain = SessionFactory(owner=owner, title="", metadata={})
    ended = SessionFactory(
        owner=owner,
        title="Des couleurs — 色",
        metadata={"user_id": "u-1", "nested": {"a": [1, 2.5, None]}},
        status="ended",
        ended_at=dt.datetime(2026, 12, 4, 21, 0, 0, 7, tzinfo=dt.UTC),
    )
    RunFactory(
        session=ended, status="completed", input_tokens=12, output_tokens=3, cost=Decimal("0.25")
    )
    RunFactory(session=ended, status="failed", reasoning_tokens=4, unpriced_turns=1)
    sessions = list(Session.objects.select_related("owner").filter(pk__in=[plain.pk, ended.pk]))
    sessions_add_run_totals(sessions)
    for session in sessions:
        serializer = SessionSerializer()
        drf = serializers.ModelSerializer.to_representation(serializer, session)
        assert serializer.to_representation(session) == dict(drf)
        # And byte for byte once rendered as the API renders it.
        assert JSONRenderer().render(
            serializer.to_representation(session)
        ) == JSONRenderer().render(drf)
