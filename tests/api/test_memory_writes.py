"""Writing memory through the API: POST /memory/, PATCH and DELETE /memory/{id}/.

Alice (``api``) writes her sessions' entries and her own user entries; agent and
global entries are read-only for her (403). Bob (``other_api``) cannot touch Alice's
entries: they are a 404 for him. Charlie (``staff_api``) writes everything. Every
write bumps the version and leaves a revision; a stale version is a 409 that shows
the entry as it is, and writes nothing.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.utils import timezone

from memory_app.models import MemoryEntry, MemoryRevision
from sessions_app.models import RunEvent
from tests.factories import MemoryEntryFactory, SessionFactory

pytestmark = pytest.mark.django_db

MEMORY = "/api/v1/memory/"
MAX_VALUE_BYTES = 64 * 1024


def detail(entry_id: Any) -> str:
    return f"{MEMORY}{entry_id}/"


def errors(response) -> list[tuple[str, str | None]]:
    """(code, attr) of each error, in the API's one error shape."""
    return [(error["code"], error["attr"]) for error in response.json()["errors"]]


def assert_invalid(response, attr: str) -> None:
    assert response.status_code == 400, response.content
    assert response.json()["type"] == "validation_error"
    assert attr in [a for _, a in errors(response)]


def by_user(user) -> dict[str, Any]:
    return {"kind": "user", "user": user.pk, "run": None, "tool_call": None}


@pytest.fixture
def session(owner):
    return SessionFactory(owner=owner)


@pytest.fixture
def bob_session(other_user):
    return SessionFactory(owner=other_user)


@pytest.fixture
def entry(api, session) -> dict[str, Any]:
    """Alice's session entry "colour", created through the API (version 1)."""
    response = api.post(
        MEMORY,
        {"key": "colour", "value": "green", "scope": "session", "session": str(session.pk)},
        format="json",
    )
    assert response.status_code == 201, response.content
    return response.json()


def revision_rows(entry_id: Any) -> list[tuple[int, Any, str]]:
    return list(
        MemoryRevision.objects.filter(entry_id=entry_id)
        .order_by("version")
        .values_list("version", "value", "action")
    )


# --- POST /memory/ ------------------------------------------------------------


def test_create_in_own_session(api, owner, session):
    response = api.post(
        MEMORY,
        {"key": "colour", "value": {"name": "green"}, "scope": "session", "session": session.pk},
        format="json",
    )

    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["key"], body["value"], body["scope"], body["version"]) == (
        "colour",
        {"name": "green"},
        "session",
        1,
    )
    assert (body["session"], body["user"], body["agent"]) == (str(session.pk), None, "")
    assert body["written_by"] == by_user(owner)
    stored = MemoryEntry.objects.get(pk=body["id"])
    assert (stored.session_id, stored.value, stored.version) == (session.pk, {"name": "green"}, 1)
    assert revision_rows(body["id"]) == [(1, {"name": "green"}, "created")]


def test_create_in_own_session_is_a_memory_stored_event_in_its_log(api, owner, session):
    before = list(RunEvent.objects.filter(session=session).values_list("seq", flat=True))

    body = api.post(
        MEMORY,
        {"key": "colour", "value": "green", "scope": "session", "session": str(session.pk)},
        format="json",
    ).json()

    (event,) = RunEvent.objects.filter(session=session, type="memory.stored")
    assert event.seq == max(before, default=0) + 1
    assert event.run_id is None
    assert event.data["entry"] == body["id"]
    assert (event.data["key"], event.data["scope"], event.data["version"]) == (
        "colour",
        "session",
        1,
    )
    assert event.data["action"] == "created"
    assert event.data["written_by"]["kind"] == "user"
    assert event.data["written_by"]["user_id"] == owner.pk


def test_create_in_bobs_session_is_a_400_and_creates_nothing(api, bob_session):
    response = api.post(
        MEMORY,
        {"key": "colour", "value": "green", "scope": "session", "session": str(bob_session.pk)},
        format="json",
    )

    assert_invalid(response, "session")
    assert not MemoryEntry.objects.exists()
    assert not MemoryRevision.objects.exists()
    assert not RunEvent.objects.filter(session=bob_session, type="memory.stored").exists()


@pytest.mark.parametrize("session_id", [None, "00000000-0000-0000-0000-000000000000", "nope"])
def test_create_session_scope_needs_a_session_of_ones_own(api, session_id):
    body = {"key": "colour", "value": "green", "scope": "session"}
    if session_id is not None:
        body["session"] = session_id

    assert_invalid(api.post(MEMORY, body, format="json"), "session")
    assert not MemoryEntry.objects.exists()


def test_create_user_scope_is_alices_own(api, owner):
    response = api.post(MEMORY, {"key": "name", "value": "Ada", "scope": "user"}, format="json")

    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["scope"], body["user"], body["session"], body["version"]) == (
        "user",
        owner.pk,
        None,
        1,
    )
    assert body["written_by"] == by_user(owner)


def test_create_user_scope_naming_herself_is_fine(api, owner):
    response = api.post(
        MEMORY, {"key": "name", "value": "Ada", "scope": "user", "user": owner.pk}, format="json"
    )

    assert response.status_code == 201
    assert response.json()["user"] == owner.pk


def test_create_user_scope_for_bob_by_alice_is_a_400(api, other_user):
    response = api.post(
        MEMORY,
        {"key": "name", "value": "Mallory", "scope": "user", "user": other_user.pk},
        format="json",
    )

    assert_invalid(response, "user")
    assert not MemoryEntry.objects.exists()


def test_staff_create_user_memory_for_bob(staff_api, staff, other_user, other_api):
    response = staff_api.post(
        MEMORY,
        {"key": "name", "value": "Bob", "scope": "user", "user": other_user.pk},
        format="json",
    )

    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["user"], body["written_by"]) == (other_user.pk, by_user(staff))
    # It is Bob's: he reads it.
    assert other_api.get(detail(body["id"])).json()["value"] == "Bob"


@pytest.mark.parametrize(
    "body",
    [
        {"key": "tone", "value": "formal", "scope": "agent", "agent": "assistant"},
        {"key": "tone", "value": "formal", "scope": "global"},
    ],
)
def test_alice_cannot_create_shared_memory(api, body):
    response = api.post(MEMORY, body, format="json")

    assert response.status_code == 403
    assert response.json()["type"] == "client_error"
    assert errors(response)[0][0] == "permission_denied"
    assert not MemoryEntry.objects.exists()


@pytest.mark.parametrize(
    "body",
    [
        {"key": "tone", "value": "formal", "scope": "agent", "agent": "assistant"},
        {"key": "tone", "value": "formal", "scope": "global"},
    ],
)
def test_staff_create_shared_memory(staff_api, staff, api, body):
    response = staff_api.post(MEMORY, body, format="json")

    assert response.status_code == 201, response.content
    created = response.json()
    assert (created["scope"], created["agent"], created["version"]) == (
        body["scope"],
        body.get("agent", ""),
        1,
    )
    assert created["written_by"] == by_user(staff)
    # Everyone reads shared memory.
    assert api.get(detail(created["id"])).status_code == 200


def test_staff_create_agent_memory_needs_an_agent(staff_api):
    response = staff_api.post(
        MEMORY, {"key": "tone", "value": "formal", "scope": "agent"}, format="json"
    )

    assert_invalid(response, "agent")


def test_create_an_existing_entry_is_a_409_showing_it(api, session, entry):
    response = api.post(
        MEMORY,
        {"key": "colour", "value": "blue", "scope": "session", "session": str(session.pk)},
        format="json",
    )

    assert response.status_code == 409
    body = response.json()
    assert body["type"] == "client_error"
    assert errors(response)[0][0] == "version_conflict"
    assert body["current"]["id"] == entry["id"]
    assert (body["current"]["value"], body["current"]["version"]) == ("green", 1)
    stored = MemoryEntry.objects.get()
    assert (stored.value, stored.version) == ("green", 1)
    assert revision_rows(entry["id"]) == [(1, "green", "created")]


def test_same_key_in_another_scope_or_session_is_another_entry(api, owner, session, entry):
    other_session = SessionFactory(owner=owner)

    in_other_session = api.post(
        MEMORY,
        {"key": "colour", "value": "red", "scope": "session", "session": str(other_session.pk)},
        format="json",
    )
    as_user = api.post(MEMORY, {"key": "colour", "value": "blue", "scope": "user"}, format="json")

    assert (in_other_session.status_code, as_user.status_code) == (201, 201)
    assert MemoryEntry.objects.filter(key="colour").count() == 3


@pytest.mark.parametrize(
    ("change", "attr"),
    [
        ({"scope": "planet"}, "scope"),
        ({"scope": ""}, "scope"),
        ({"scope": None}, "scope"),
        ({"key": ""}, "key"),
        ({"key": "   "}, "key"),
        ({"key": "k" * 201}, "key"),
        ({"key": None}, "key"),
        ({"value": None}, "value"),
        ({"value": "x" * (MAX_VALUE_BYTES - 1)}, "value"),  # 64 KiB + 1 byte with its quotes
        ({"value": "é" * (MAX_VALUE_BYTES // 2)}, "value"),  # 2 bytes a character
        ({"expires_at": "next tuesday"}, "expires_at"),
    ],
)
def test_create_with_bad_input_is_a_400(api, session, change, attr):
    body = {"key": "colour", "value": "green", "scope": "session", "session": str(session.pk)}

    response = api.post(MEMORY, body | change, format="json")

    assert_invalid(response, attr)
    assert not MemoryEntry.objects.exists()


@pytest.mark.parametrize("missing", ["key", "value", "scope"])
def test_create_without_a_required_field_is_a_400(api, session, missing):
    body = {"key": "colour", "value": "green", "scope": "session", "session": str(session.pk)}
    del body[missing]

    response = api.post(MEMORY, body, format="json")

    assert_invalid(response, missing)
    assert errors(response) == [("required", missing)]


def test_create_at_the_limits(api, session):
    at_limit = "x" * (MAX_VALUE_BYTES - 2)  # 64 KiB exactly, with its quotes

    response = api.post(
        MEMORY,
        {"key": "k" * 200, "value": at_limit, "scope": "session", "session": str(session.pk)},
        format="json",
    )

    assert response.status_code == 201, response.content[:300]
    assert MemoryEntry.objects.get().value == at_limit


@pytest.mark.parametrize("value", [False, 0, "", [], {}])
def test_create_keeps_falsy_values(api, session, value):
    response = api.post(
        MEMORY,
        {"key": "flag", "value": value, "scope": "session", "session": str(session.pk)},
        format="json",
    )

    assert response.status_code == 201, response.content
    assert response.json()["value"] == value
    assert MemoryEntry.objects.get().value == value


def test_create_with_an_expiry(api, session):
    expires = timezone.now() + dt.timedelta(days=7)

    response = api.post(
        MEMORY,
        {
            "key": "colour",
            "value": "green",
            "scope": "session",
            "session": str(session.pk),
            "expires_at": expires.isoformat(),
        },
        format="json",
    )

    assert response.status_code == 201
    assert MemoryEntry.objects.get().expires_at == expires


def test_create_needs_authentication(client, session):
    response = client.post(
        MEMORY,
        {"key": "colour", "value": "green", "scope": "session", "session": str(session.pk)},
        content_type="application/json",
    )

    assert response.status_code == 401
    assert not MemoryEntry.objects.exists()


# --- PATCH /memory/{id}/ --------------------------------------------------------


def test_patch_with_the_current_version(api, owner, entry):
    response = api.patch(detail(entry["id"]), {"value": "blue", "version": 1}, format="json")

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["id"], body["value"], body["version"]) == (entry["id"], "blue", 2)
    assert body["written_by"] == by_user(owner)
    stored = MemoryEntry.objects.get(pk=entry["id"])
    assert (stored.value, stored.version) == ("blue", 2)
    assert revision_rows(entry["id"]) == [(1, "green", "created"), (2, "blue", "updated")]


def test_patch_names_the_person_who_changed_it(api, owner, session):
    by_a_run = MemoryEntryFactory(key="colour", session=session, written_by_kind="run")

    body = api.patch(detail(by_a_run.pk), {"value": "blue", "version": 1}, format="json").json()

    assert body["written_by"] == by_user(owner)


def test_patch_with_a_stale_version_is_a_409_and_writes_nothing(api, entry):
    api.patch(detail(entry["id"]), {"value": "blue", "version": 1}, format="json")

    response = api.patch(detail(entry["id"]), {"value": "red", "version": 1}, format="json")

    assert response.status_code == 409
    body = response.json()
    assert errors(response)[0][0] == "version_conflict"
    assert body["current"]["id"] == entry["id"]
    assert (body["current"]["value"], body["current"]["version"]) == ("blue", 2)
    stored = MemoryEntry.objects.get(pk=entry["id"])
    assert (stored.value, stored.version) == ("blue", 2)
    assert revision_rows(entry["id"]) == [(1, "green", "created"), (2, "blue", "updated")]


def test_patch_with_a_version_from_the_future_is_a_409(api, entry):
    response = api.patch(detail(entry["id"]), {"value": "red", "version": 7}, format="json")

    assert response.status_code == 409
    assert response.json()["current"]["version"] == 1
    assert MemoryEntry.objects.get(pk=entry["id"]).value == "green"


@pytest.mark.parametrize(
    ("body", "attr"),
    [
        ({"value": "blue"}, "version"),
        ({"value": "blue", "version": None}, "version"),
        ({"value": "blue", "version": "abc"}, "version"),
        ({"value": "blue", "version": 0}, "version"),
        ({"version": 1}, "value"),
        ({"value": None, "version": 1}, "value"),
        ({"value": "x" * MAX_VALUE_BYTES, "version": 1}, "value"),
    ],
)
def test_patch_with_bad_input_is_a_400(api, entry, body, attr):
    response = api.patch(detail(entry["id"]), body, format="json")

    assert_invalid(response, attr)
    stored = MemoryEntry.objects.get(pk=entry["id"])
    assert (stored.value, stored.version) == ("green", 1)


def test_patch_keeps_the_expiry_when_not_sent(api, session):
    expires = timezone.now() + dt.timedelta(days=7)
    entry = MemoryEntryFactory(key="colour", session=session, expires_at=expires)

    response = api.patch(detail(entry.pk), {"value": "blue", "version": 1}, format="json")

    assert response.status_code == 200
    assert MemoryEntry.objects.get(pk=entry.pk).expires_at == expires
    assert response.json()["expires_at"] is not None


def test_patch_changes_or_clears_the_expiry_when_sent(api, session):
    entry = MemoryEntryFactory(
        key="colour", session=session, expires_at=timezone.now() + dt.timedelta(days=7)
    )
    later = timezone.now() + dt.timedelta(days=30)

    api.patch(
        detail(entry.pk),
        {"value": "blue", "version": 1, "expires_at": later.isoformat()},
        format="json",
    )
    assert MemoryEntry.objects.get(pk=entry.pk).expires_at == later

    api.patch(detail(entry.pk), {"value": "red", "version": 2, "expires_at": None}, format="json")
    assert MemoryEntry.objects.get(pk=entry.pk).expires_at is None


def test_bob_gets_404_patching_alices_entries(other_api, owner, entry):
    user_entry = MemoryEntryFactory(key="name", user_scoped=True, user=owner, value="Ada")

    for entry_id in (entry["id"], user_entry.pk):
        response = other_api.patch(
            detail(entry_id), {"value": "hacked", "version": 1}, format="json"
        )
        assert response.status_code == 404
    assert set(MemoryEntry.objects.values_list("value", flat=True)) == {"green", "Ada"}
    assert MemoryEntry.objects.filter(version__gt=1).count() == 0


@pytest.mark.parametrize("trait", ["agent_scoped", "global_scoped"])
def test_alice_cannot_patch_shared_memory(api, trait):
    shared = MemoryEntryFactory(key="tone", value="formal", **{trait: True})

    response = api.patch(detail(shared.pk), {"value": "rude", "version": 1}, format="json")

    assert response.status_code == 403
    assert MemoryEntry.objects.get(pk=shared.pk).value == "formal"


@pytest.mark.parametrize("trait", ["agent_scoped", "global_scoped", "user_scoped"])
def test_staff_patch_any_entry(staff_api, staff, other_user, trait):
    extra = {"user": other_user} if trait == "user_scoped" else {}
    target = MemoryEntryFactory(key="tone", value="formal", **{trait: True}, **extra)

    response = staff_api.patch(detail(target.pk), {"value": "warm", "version": 1}, format="json")

    assert response.status_code == 200, response.content
    assert (response.json()["version"], response.json()["written_by"]) == (2, by_user(staff))
    stored = MemoryEntry.objects.get(pk=target.pk)
    # The entry stays where it was (Bob's stays Bob's).
    assert (stored.value, stored.scope, stored.user_id) == ("warm", target.scope, target.user_id)


def test_put_is_not_allowed(api, entry):
    response = api.put(detail(entry["id"]), {"value": "blue", "version": 1}, format="json")

    assert response.status_code == 405
    assert MemoryEntry.objects.get(pk=entry["id"]).value == "green"


# --- DELETE /memory/{id}/ -------------------------------------------------------


def test_delete(api, owner, session, entry):
    response = api.delete(detail(entry["id"]))

    assert response.status_code == 204
    assert not MemoryEntry.objects.filter(pk=entry["id"]).exists()
    assert api.get(detail(entry["id"])).status_code == 404
    assert revision_rows(entry["id"]) == [(1, "green", "created"), (2, None, "deleted")]
    deleted = MemoryRevision.objects.get(entry_id=entry["id"], action="deleted")
    assert (deleted.actor_kind, deleted.actor_user_id) == ("user", owner.pk)
    assert RunEvent.objects.filter(session=session, type="memory.deleted").count() == 1


def test_delete_with_the_current_version(api, entry):
    api.patch(detail(entry["id"]), {"value": "blue", "version": 1}, format="json")

    response = api.delete(f"{detail(entry['id'])}?version=2")

    assert response.status_code == 204
    assert not MemoryEntry.objects.exists()
    assert revision_rows(entry["id"])[-1] == (3, None, "deleted")


def test_delete_with_a_stale_version_is_a_409_and_keeps_the_entry(api, entry):
    api.patch(detail(entry["id"]), {"value": "blue", "version": 1}, format="json")

    response = api.delete(f"{detail(entry['id'])}?version=1")

    assert response.status_code == 409
    assert errors(response)[0][0] == "version_conflict"
    assert (response.json()["current"]["value"], response.json()["current"]["version"]) == (
        "blue",
        2,
    )
    assert MemoryEntry.objects.get(pk=entry["id"]).value == "blue"
    assert [action for _, _, action in revision_rows(entry["id"])] == ["created", "updated"]


@pytest.mark.parametrize("version", ["abc", "0", "-1", "1.5", ""])
def test_delete_with_a_malformed_version_is_a_400(api, entry, version):
    response = api.delete(f"{detail(entry['id'])}?version={version}")

    assert_invalid(response, "version")
    assert MemoryEntry.objects.filter(pk=entry["id"]).exists()


def test_delete_twice_is_a_404(api, entry):
    api.delete(detail(entry["id"]))

    assert api.delete(detail(entry["id"])).status_code == 404


def test_bob_gets_404_deleting_alices_entries(other_api, owner, entry):
    user_entry = MemoryEntryFactory(key="name", user_scoped=True, user=owner)

    for entry_id in (entry["id"], user_entry.pk):
        assert other_api.delete(detail(entry_id)).status_code == 404
    assert MemoryEntry.objects.count() == 2
    assert not MemoryRevision.objects.filter(action="deleted").exists()


@pytest.mark.parametrize("trait", ["agent_scoped", "global_scoped"])
def test_alice_cannot_delete_shared_memory(api, trait):
    shared = MemoryEntryFactory(key="tone", **{trait: True})

    assert api.delete(detail(shared.pk)).status_code == 403
    assert MemoryEntry.objects.filter(pk=shared.pk).exists()


def test_staff_delete_anyones_entry(staff_api, staff, entry):
    assert staff_api.delete(detail(entry["id"])).status_code == 204

    deleted = MemoryRevision.objects.get(entry_id=entry["id"], action="deleted")
    assert deleted.actor_user_id == staff.pk


@pytest.mark.django_db(transaction=True)
def test_staff_create_user_memory_for_an_unknown_user_is_a_400(staff_api):
    # Runs in a real transaction: a missing user is only noticed when it commits.
    response = staff_api.post(
        MEMORY, {"key": "name", "value": "Nobody", "scope": "user", "user": 987654}, format="json"
    )

    assert_invalid(response, "user")
    assert not MemoryEntry.objects.exists()
