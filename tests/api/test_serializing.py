"""Model serializers build their fields once per class and give each instance its
own copies; detail routes find their row by id alone."""

import pytest

from runs_app.api.serializers import RunDetailSerializer, RunSerializer
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
