"""Dates typed into the console's from/until boxes that no calendar has, or that
lie past the ends of the datetime range, filter everything out and say so: never a
500, never every row as if the filter were not there."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.urls import reverse

from goaai.admin_base import InputFilter
from tests.admin.messages import error_messages
from tests.factories import RunFactory, ToolCallFactory, UserFactory

pytestmark = pytest.mark.django_db

OUT_OF_RANGE = [
    "2026-02-30",
    "2026-13-01",
    "2026-13-40",
    "0000-01-01",
    "2026-02-30T10:00:00",
    "2026-01-01T25:00:00",
    "0001-01-01T00:00:00+05:00",  # before year 1 in UTC
    "9999-12-31T23:59:59-05:00",  # after year 9999 in UTC
    "99999-01-01",
    "1-1-1",
]


def _date_filtered_changelists() -> list[tuple[str, str]]:
    """(changelist URL name, parameter) for every from/until box in the admin."""
    found = []
    for model, model_admin in admin.site._registry.items():
        for entry in model_admin.list_filter:
            if isinstance(entry, type) and issubclass(entry, InputFilter):
                name = entry.parameter_name
                if name.endswith(("_from", "_until")):
                    meta = model._meta
                    found.append((f"admin:{meta.app_label}_{meta.model_name}_changelist", name))
    return found


def test_every_changelist_has_been_found() -> None:
    found = _date_filtered_changelists()
    assert len(found) >= 8
    names = {url_name for url_name, _ in found}
    for listed in ("run", "turn", "toolcall", "runevent", "score", "memoryentry", "session"):
        assert any(name.endswith(f"_{listed}_changelist") for name in names), listed


@pytest.mark.parametrize("value", OUT_OF_RANGE)
def test_out_of_range_dates_filter_nothing(client, value: str) -> None:
    client.force_login(UserFactory(is_staff=True, is_superuser=True))
    ToolCallFactory(turn__run=RunFactory())
    for url_name, parameter in _date_filtered_changelists():
        response = client.get(reverse(url_name), {parameter: value})
        assert response.status_code == 200, (url_name, parameter, value)
        assert list(response.context["cl"].result_list) == [], (url_name, parameter, value)
        (said,) = error_messages(response)
        assert said.startswith(f"Filter {parameter}={value!r} was not applied: "), said
        assert "Nothing is listed" in said


def test_until_the_last_day_there_is_keeps_every_row(client) -> None:
    client.force_login(UserFactory(is_staff=True, is_superuser=True))
    run = RunFactory()
    url = reverse("admin:runs_app_run_changelist")
    response = client.get(url, {"created_at_until": "9999-12-31"})
    assert [row.pk for row in response.context["cl"].result_list] == [run.pk]
    response = client.get(url, {"created_at_from": "9999-12-31"})
    assert list(response.context["cl"].result_list) == []
