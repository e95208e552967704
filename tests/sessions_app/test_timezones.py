"""The time zone pages are written in: the user's preference, else the browser's
cookie (checked against the zone database), else the server's; the API stays UTC."""

from __future__ import annotations

import datetime as dt
import re
import zoneinfo

import pytest
from django.test import Client
from django.utils import timezone

from sessions_app.models import Session, UserPreferences
from sessions_app.timezones import (
    COOKIE_NAME,
    is_time_zone,
    time_zone_named,
    time_zones,
)
from tests.factories import SessionFactory

pytestmark = pytest.mark.django_db

LOS_ANGELES = "America/Los_Angeles"
TOKYO = "Asia/Tokyo"


@pytest.fixture
def alice_client(owner) -> Client:
    client = Client()
    client.force_login(owner)
    return client


@pytest.fixture
def staff_client(staff) -> Client:
    client = Client()
    client.force_login(staff)
    return client


@pytest.mark.parametrize("name", ["America/Los_Angeles", "Europe/Paris", "UTC", "Etc/GMT+5"])
def test_iana_names_are_time_zones(name: str) -> None:
    zone = time_zone_named(name)
    assert zone is not None
    assert zone.key == name
    assert is_time_zone(name)
    assert name in time_zones()


@pytest.mark.parametrize(
    "name",
    [
        "",
        None,
        "Mars/Olympus_Mons",
        "../../../etc/passwd",
        "/etc/localtime",
        "America/../Europe/Paris",
        "localtime",
        "posixrules",
        "Europe/Paris\x00",
        "Europe/Paris; Path=/",
        "a" * 65,
        "europe/paris",
    ],
)
def test_anything_else_is_not(name: str | None) -> None:
    assert time_zone_named(name) is None
    assert not is_time_zone(name or "")


def test_the_choices_are_sorted_zone_names() -> None:
    zones = time_zones()
    assert list(zones) == sorted(zones)
    assert "localtime" not in zones
    assert all(time_zone_named(zone) is not None for zone in zones[:50])


def _meta(response) -> tuple[str, str]:
    html = response.content.decode()
    match = re.search(r'<meta name="time-zone" content="([^"]*)" data-source="([^"]*)"', html)
    assert match, "the page names no time zone"
    return match.group(1), match.group(2)


def test_without_a_cookie_pages_are_in_the_servers_zone(alice_client: Client) -> None:
    assert _meta(alice_client.get("/")) == ("UTC", "server")


def test_the_browsers_zone_from_its_cookie(alice_client: Client) -> None:
    alice_client.cookies[COOKIE_NAME] = LOS_ANGELES
    assert _meta(alice_client.get("/")) == (LOS_ANGELES, "browser")


@pytest.mark.parametrize("cookie", ["Not/AZone", "../../etc/passwd", "x" * 300, "UTC%00"])
def test_a_cookie_that_names_no_zone_is_ignored(alice_client: Client, cookie: str) -> None:
    alice_client.cookies[COOKIE_NAME] = cookie
    response = alice_client.get("/")
    assert response.status_code == 200
    assert _meta(response) == ("UTC", "server")


def test_the_users_choice_wins_over_the_browser(alice_client: Client, owner) -> None:
    UserPreferences.objects.create(user=owner, time_zone=TOKYO)
    alice_client.cookies[COOKIE_NAME] = LOS_ANGELES
    assert _meta(alice_client.get("/")) == (TOKYO, "preferences")


def test_a_stored_choice_that_is_no_zone_falls_back(alice_client: Client, owner) -> None:
    UserPreferences.objects.create(user=owner, time_zone="Gone/Away")
    alice_client.cookies[COOKIE_NAME] = LOS_ANGELES
    assert _meta(alice_client.get("/")) == (LOS_ANGELES, "browser")


def test_the_login_page_names_a_zone_too(client: Client) -> None:
    client.cookies[COOKIE_NAME] = TOKYO
    assert _meta(client.get("/accounts/login/")) == (TOKYO, "browser")


def _label_in(zone: zoneinfo.ZoneInfo, moment: dt.datetime, now: dt.datetime) -> str:
    age = (now.astimezone(zone).date() - moment.astimezone(zone).date()).days
    return {0: "Today", 1: "Yesterday"}.get(age, "Previous 7 days")


def _group_of(html: str, session: Session) -> str:
    before = html[: html.index(f'data-session-id="{session.pk}"')]
    return re.findall(r'class="session-group-title"[^>]*>([^<]*)<', before)[-1]


def test_the_groups_and_times_follow_the_time_zone(alice_client: Client, owner) -> None:
    session = SessionFactory(owner=owner)
    now = timezone.now()
    utc, tokyo = zoneinfo.ZoneInfo("UTC"), zoneinfo.ZoneInfo(TOKYO)
    # A moment that is on another day in Tokyo than in UTC.
    moment = next(
        now - dt.timedelta(hours=hours)
        for hours in range(1, 48)
        if _label_in(utc, now - dt.timedelta(hours=hours), now)
        != _label_in(tokyo, now - dt.timedelta(hours=hours), now)
    )
    Session.objects.filter(pk=session.pk).update(last_activity_at=moment)

    html = alice_client.get("/").content.decode()
    assert _group_of(html, session) == _label_in(utc, moment, now)

    alice_client.cookies[COOKIE_NAME] = TOKYO
    html = alice_client.get("/").content.decode()
    assert _group_of(html, session) == _label_in(tokyo, moment, now)
    local = moment.astimezone(tokyo)
    assert f'datetime="{local.isoformat()}"' in html
    if _label_in(tokyo, moment, now) in ("Today", "Yesterday"):
        assert f">{local:%H:%M}</time>" in html


def test_the_api_stays_in_utc(alice_client: Client, owner) -> None:
    session = SessionFactory(owner=owner)
    alice_client.cookies[COOKIE_NAME] = TOKYO
    UserPreferences.objects.create(user=owner, time_zone=LOS_ANGELES)
    body = alice_client.get(f"/api/v1/sessions/{session.pk}/").json()
    assert body["created_at"].endswith("Z")
    assert body["last_activity_at"].endswith("Z")


def test_the_admin_is_in_the_users_zone_with_24_hour_times(staff_client: Client, staff) -> None:
    session = SessionFactory(owner=staff, title="Evening chat")
    evening = dt.datetime(2026, 3, 4, 22, 30, tzinfo=dt.UTC)  # 07:30 the next day in Tokyo
    Session.objects.filter(pk=session.pk).update(created_at=evening)
    UserPreferences.objects.create(user=staff, time_zone=TOKYO)
    response = staff_client.get(f"/admin/sessions_app/session/{session.pk}/timeline/")
    assert response.status_code == 200
    html = response.content.decode()
    assert _meta(response) == (TOKYO, "preferences")
    assert "2026-03-05 07:30:00" in html
    assert "data-server-times" in html
    # The lists' columns: 24 hours to the millisecond, no a.m./p.m.
    changelist = staff_client.get("/admin/sessions_app/session/").content.decode()
    assert "2026-03-05 07:30:00.000" in changelist
    assert not re.search(r"\d [ap]\.m\.", changelist)
    UserPreferences.objects.filter(user=staff).update(time_zone="")
    changelist = staff_client.get("/admin/sessions_app/session/").content.decode()
    assert "2026-03-04 22:30:00.000" in changelist
    # Django's own forms: 24 hours too.
    form = staff_client.get(f"/admin/sessions_app/session/{session.pk}/change/").content.decode()
    assert "March 4, 2026, 22:30" in form


def test_only_pages_got_by_get_are_loaded_again_in_the_browsers_zone(client: Client) -> None:
    # The browser's zone is not known yet: a page of times asks to be loaded again
    # in it, unless it answers a POST (loading it again would post again).
    assert "data-server-times" in client.get("/admin/login/").content.decode()
    refused = client.post("/admin/login/", {"username": "nobody", "password": "wrong"})
    assert refused.status_code == 200
    assert "data-server-times" not in refused.content.decode()
    # A page without times of the server's never is.
    assert "data-server-times" not in client.get("/accounts/login/").content.decode()
