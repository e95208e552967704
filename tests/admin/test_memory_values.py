"""Memory in the console: the lists show each entry's value and each revision's
change, a revision's page its diff against the version before, and an operator types
values as plain text or JSON (``Rex`` is the string "Rex", ``42`` the number)."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from memory_app.models import MemoryEntry, MemoryRevision
from memory_app.services import memory_delete, memory_store
from tests.admin.messages import error_messages
from tests.factories import SessionFactory

pytestmark = pytest.mark.django_db

ENTRIES = reverse("admin:memory_app_memoryentry_changelist")
REVISIONS = reverse("admin:memory_app_memoryrevision_changelist")


@pytest.fixture
def operator(client, staff):
    client.force_login(staff)
    return client


@pytest.fixture
def session(owner):
    return SessionFactory(owner=owner)


def _store(session, key, value):
    return memory_store(key=key, value=value, scope="session", session_id=session.pk)


def _cells(page: str, column: str) -> list[str]:
    return re.findall(
        rf'<td class="field-{column}"><span class="goaai-excerpt" title="[^"]*">(.*?)</span></td>',
        page,
    )


def test_the_entries_list_shows_each_value_on_one_line(operator, session):
    _store(session, "name", "Rex")
    _store(session, "prefs", {"langs": ["en", "fr"]})
    _store(session, "story", "once upon a time\n" * 40)
    page = operator.get(ENTRIES).content.decode()
    values = _cells(page, "value_excerpt")
    assert "Rex" in values
    assert "{&quot;langs&quot;: [&quot;en&quot;, &quot;fr&quot;]}" in values
    (story,) = [value for value in values if value.startswith("once")]
    assert story.endswith("…")
    assert len(story) == 80


def test_the_revisions_list_sums_up_each_change(operator, session):
    _store(session, "colour", "green")
    _store(session, "colour", "blue")
    _store(session, "prefs", {"n": 1})
    _store(session, "prefs", {"n": 2})
    _store(session, "story", "\n".join(f"line {n}" for n in range(10)))
    _store(session, "story", "\n".join(f"line {n}" for n in range(1, 12)))
    memory_delete(key="colour", scope="session", session_id=session.pk)
    changes = set(_cells(operator.get(REVISIONS).content.decode(), "change_summary"))
    assert {
        "set to green",
        "green → blue",
        "deleted (was blue)",
        "{&quot;n&quot;: 1} → {&quot;n&quot;: 2}",
        "+2 \u22121 lines",
    } <= changes


def test_a_revisions_page_shows_its_diff_against_the_version_before(operator, session):
    _store(session, "colour", "green")
    updated = _store(session, "colour", "blue")
    revision = MemoryRevision.objects.get(entry_id=updated.pk, version=2)
    page = operator.get(reverse("admin:memory_app_memoryrevision_change", args=[revision.pk]))
    html = page.content.decode()
    assert '<span class="goaai-diff-removed">-green</span>' in html
    assert '<span class="goaai-diff-added">+blue</span>' in html
    first = MemoryRevision.objects.get(entry_id=updated.pk, version=1)
    html = operator.get(reverse("admin:memory_app_memoryrevision_change", args=[first.pk]))
    assert '<span class="goaai-diff-added">+green</span>' in html.content.decode()


def test_a_diff_escapes_what_it_shows(operator, session):
    _store(session, "note", "<b>hi</b>")
    entry = _store(session, "note", "<script>alert(1)</script>")
    revision = MemoryRevision.objects.get(entry_id=entry.pk, version=2)
    html = operator.get(reverse("admin:memory_app_memoryrevision_change", args=[revision.pk]))
    content = html.content.decode()
    assert "<script>alert(1)</script>" not in content
    assert "+&lt;script&gt;alert(1)&lt;/script&gt;" in content


def _edit(client, entry: MemoryEntry, typed: str):
    return client.post(
        reverse("admin:memory_app_memoryentry_change", args=[entry.pk]),
        {"value": typed, "expires_at_0": "", "expires_at_1": "", "seen_version": entry.version},
    )


@pytest.mark.parametrize(
    ("typed", "stored"),
    [
        ("Rex", "Rex"),
        ('"Rex"', "Rex"),
        ("  Rex the dog  ", "Rex the dog"),
        ("two\r\nlines", "two\nlines"),
        ("42", 42),
        ("4.5", 4.5),
        ("true", True),
        ("null", None),
        ('{"a": [1, 2]}', {"a": [1, 2]}),
        ("[]", []),
        ('""', ""),
        ('"42"', "42"),
        ("{not json", "{not json"),
        ("NaN", "NaN"),
        ("1e999", "1e999"),
    ],
)
def test_an_edit_keeps_json_as_json_and_anything_else_as_the_text_typed(
    operator, session, staff, typed, stored
):
    entry = _store(session, "name", "Fido")
    response = _edit(operator, entry, typed)
    if stored is None:
        # JSON null is no value for an entry to hold: the form says so.
        assert response.status_code == 200
        assert "This field is required." in response.content.decode()
        return
    assert response.status_code == 302, response.content.decode()[:2000]
    entry.refresh_from_db()
    assert entry.value == stored
    assert type(entry.value) is type(stored)
    # The edit is a revision naming the operator, as every admin edit is.
    revision = MemoryRevision.objects.get(entry_id=entry.pk, version=2)
    assert (revision.value, revision.actor_kind, revision.actor_user_id) == (
        stored,
        "user",
        staff.pk,
    )


def test_an_empty_box_is_refused(operator, session):
    entry = _store(session, "name", "Fido")
    response = _edit(operator, entry, "   ")
    assert response.status_code == 200
    assert "This field is required." in response.content.decode()
    entry.refresh_from_db()
    assert (entry.value, entry.version) == ("Fido", 1)


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("Rex", "Rex"),
        ("42", "&quot;42&quot;"),
        (" padded ", "&quot; padded &quot;"),
        ("", "&quot;&quot;"),
        (42, "42"),
        ({"a": 1}, "{&quot;a&quot;: 1}"),
    ],
)
def test_the_edit_box_shows_a_value_so_that_saving_it_again_keeps_it(
    operator, session, value, shown
):
    entry = _store(session, "thing", value)
    page = operator.get(reverse("admin:memory_app_memoryentry_change", args=[entry.pk]))
    box = re.search(r'<textarea name="value"[^>]*>\n?(.*?)</textarea>', page.content.decode(), re.S)
    assert box
    assert box.group(1) == shown
    assert _edit(operator, entry, box.group(1).replace("&quot;", '"')).status_code == 302
    entry.refresh_from_db()
    assert entry.value == value


def test_a_form_sent_back_keeps_what_was_typed(operator, session):
    entry = _store(session, "name", "Fido")
    _store(session, "name", "Rover")  # changed meanwhile: the edit is refused
    response = _edit(operator, entry, "Rex the {dog")
    assert response.status_code == 200
    assert "changed meanwhile" in response.content.decode()
    assert ">\nRex the {dog</textarea>" in response.content.decode()
    assert error_messages(response) == []


def test_adding_an_entry_takes_plain_text(operator, staff):
    response = operator.post(
        reverse("admin:memory_app_memoryentry_add"),
        {
            "key": "motto",
            "value": "be kind",
            "scope": "global",
            "agent": "",
            "session": "",
            "user": "",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    entry = MemoryEntry.objects.get(key="motto")
    assert (entry.value, entry.written_by_user_id) == ("be kind", staff.pk)


@pytest.mark.parametrize(
    ("typed", "said"),
    [
        ('{"a": "x\\u0000y"}', "cannot contain NUL characters"),
        ("x" * (64 * 1024 + 1), "A value is at most 65536 bytes once encoded."),
    ],
)
def test_a_value_the_api_would_refuse_is_refused_in_the_form(operator, session, typed, said):
    entry = _store(session, "name", "Fido")
    response = _edit(operator, entry, typed)
    assert response.status_code == 200
    assert said in response.content.decode()
    entry.refresh_from_db()
    assert entry.value == "Fido"


def test_a_new_entrys_box_starts_empty(operator):
    page = operator.get(reverse("admin:memory_app_memoryentry_add")).content.decode()
    assert re.search(r'<textarea name="value"[^>]*>\n?</textarea>', page)
