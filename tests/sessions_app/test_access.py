"""The one question the pages and live streams ask: may this user read this session
and its event log?"""

from __future__ import annotations

import uuid

import pytest
from django.contrib.auth.models import AnonymousUser

from sessions_app.access import can_read_session
from tests.factories import SessionFactory, UserFactory
from tests.permissions import staff_user

pytestmark = pytest.mark.django_db


def test_the_owner_reads_their_session(owner) -> None:
    assert can_read_session(owner, SessionFactory(owner=owner).pk)


def test_others_need_staff_and_both_view_permissions(owner, other_user, staff) -> None:
    session = SessionFactory(owner=owner)
    both = ("sessions_app.view_session", "sessions_app.view_runevent")
    assert not can_read_session(other_user, session.pk)
    assert not can_read_session(staff_user("dave"), session.pk)
    assert not can_read_session(staff_user("gina", perms=both[:1]), session.pk)
    assert not can_read_session(staff_user("nora", perms=both, is_staff=False), session.pk)
    assert can_read_session(staff_user("erin", perms=both), session.pk)
    assert can_read_session(staff, session.pk)  # a superuser


def test_an_inactive_or_anonymous_user_reads_nothing(owner) -> None:
    session = SessionFactory(owner=owner)
    owner.is_active = False
    assert not can_read_session(owner, session.pk)
    assert not can_read_session(AnonymousUser(), session.pk)


def test_no_such_session_is_the_same_no(staff) -> None:
    assert not can_read_session(staff, uuid.uuid4())
    assert not can_read_session(UserFactory(), uuid.uuid4())
