"""GET/PATCH /api/v1/me/preferences/: the caller's time zone and shortcuts switch."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from sessions_app.models import UserPreferences
from tests.api.test_staff_permissions import client_for
from tests.permissions import staff_user

pytestmark = pytest.mark.django_db

URL = "/api/v1/me/preferences/"


def codes(response) -> set[tuple[str, str | None]]:
    return {(error["code"], error["attr"]) for error in response.json()["errors"]}


def test_before_any_choice_the_defaults(api):
    response = api.get(URL)

    assert response.status_code == 200
    assert response.json() == {"time_zone": "", "shortcuts_enabled": True, "updated_at": None}
    assert not UserPreferences.objects.exists()


def test_a_change_is_saved_and_the_rest_stays(api, owner):
    first = api.patch(URL, {"time_zone": "America/Los_Angeles"}, format="json")
    assert first.status_code == 200, first.content
    assert first.json()["time_zone"] == "America/Los_Angeles"
    assert first.json()["shortcuts_enabled"] is True

    second = api.patch(URL, {"shortcuts_enabled": False}, format="json")

    assert second.json()["time_zone"] == "America/Los_Angeles"
    assert second.json()["shortcuts_enabled"] is False
    saved = UserPreferences.objects.get(user=owner)
    assert (saved.time_zone, saved.shortcuts_enabled) == ("America/Los_Angeles", False)
    assert api.get(URL).json()["updated_at"] is not None
    # Blank: back to the browser's own time zone.
    assert api.patch(URL, {"time_zone": ""}, format="json").json()["time_zone"] == ""


def test_each_user_has_their_own(api, other_api, owner):
    api.patch(URL, {"time_zone": "Asia/Tokyo", "shortcuts_enabled": False}, format="json")

    assert other_api.get(URL).json()["time_zone"] == ""
    other_api.patch(URL, {"time_zone": "Europe/Rome"}, format="json")
    assert api.get(URL).json()["time_zone"] == "Asia/Tokyo"


def test_an_auditor_keeps_preferences_of_their_own(db):
    auditor = client_for(staff_user("erin", groups=("Auditors",)))
    response = auditor.patch(URL, {"shortcuts_enabled": False}, format="json")
    assert response.status_code == 200
    assert response.json()["shortcuts_enabled"] is False


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({}, ("empty", "non_field_errors")),
        ({"time_zone": "Mars/Olympus_Mons"}, ("unknown_time_zone", "time_zone")),
        ({"time_zone": "../../etc/passwd"}, ("unknown_time_zone", "time_zone")),
        ({"time_zone": "Europe/Paris\x00"}, ("null_characters_not_allowed", "time_zone")),
        ({"time_zone": 5}, ("invalid", "time_zone")),
        ({"time_zone": None}, ("null", "time_zone")),
        ({"time_zone": "x" * 65}, ("max_length", "time_zone")),
        ({"shortcuts_enabled": "maybe"}, ("invalid", "shortcuts_enabled")),
        ({"shortcuts_enabled": None}, ("null", "shortcuts_enabled")),
    ],
)
def test_bad_input_is_a_400_that_changes_nothing(api, owner, body, code):
    api.patch(URL, {"time_zone": "Europe/Rome"}, format="json")

    response = api.patch(URL, body, format="json")

    assert response.status_code == 400, response.content
    assert code in codes(response)
    assert UserPreferences.objects.get(user=owner).time_zone == "Europe/Rome"


def test_signed_out_it_is_a_401():
    assert APIClient().get(URL).status_code == 401
    assert APIClient().patch(URL, {"shortcuts_enabled": False}, format="json").status_code == 401
