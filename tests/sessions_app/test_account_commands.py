"""The commands that set accounts up: ``ensure_admin`` (which ``make run`` calls, and
which says where goaai is reached) and ``create_user``."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from sessions_app.management.commands.ensure_admin import site_url


def run(command: str, *args: str) -> str:
    out = io.StringIO()
    call_command(command, *args, stdout=out, no_color=True)
    return out.getvalue()


@pytest.mark.parametrize(
    ("host", "port", "url"),
    [
        ("127.0.0.1", 8000, "http://127.0.0.1:8000/"),
        ("0.0.0.0", 8123, "http://127.0.0.1:8123/"),  # noqa: S104
        ("::", 9000, "http://[::1]:9000/"),
        ("::1", 9000, "http://[::1]:9000/"),
        ("localhost", 8001, "http://localhost:8001/"),
    ],
)
def test_the_address_a_browser_on_this_machine_opens(host, port, url):
    assert site_url(host, port) == url


@pytest.mark.django_db
def test_the_first_admin_is_created_and_told_where_to_sign_in_on_the_real_port():
    out = run("ensure_admin", "--host", "127.0.0.1", "--port", "8123")

    admin = get_user_model().objects.get()
    assert (admin.username, admin.is_superuser) == ("admin", True)
    assert "Sign in at http://127.0.0.1:8123/admin/ and change it there." in out
    assert (
        out.splitlines()[-1]
        == "goaai is at http://127.0.0.1:8123/ (the admin at http://127.0.0.1:8123/admin/)"
    )
    assert "8000" not in out

    again = run("ensure_admin", "--port", "8124")
    assert again.splitlines() == [
        "An administrator account exists already; nothing to do.",
        "goaai is at http://127.0.0.1:8124/ (the admin at http://127.0.0.1:8124/admin/)",
    ]
    assert get_user_model().objects.count() == 1


@pytest.mark.django_db
def test_behind_a_proxy_the_address_people_use_is_told(settings):
    settings.ALLOWED_HOSTS = ["goaai.example.com"]
    out = run("ensure_admin", "--url", "https://goaai.example.com")
    assert "Sign in at https://goaai.example.com/admin/" in out
    assert "ALLOWED_HOSTS" not in out


@pytest.mark.django_db
def test_a_host_allowed_hosts_refuses_is_warned_about(settings):
    settings.ALLOWED_HOSTS = ["127.0.0.1", "localhost", "[::1]"]
    out = run("ensure_admin", "--host", "192.168.1.20", "--port", "8000")
    assert "goaai is at http://192.168.1.20:8000/" in out
    assert "does not let 192.168.1.20 in" in out
    assert "ALLOWED_HOSTS=192.168.1.20,localhost" in out

    # Bound to every interface: this machine's browser is let in, others need a name.
    everywhere = run("ensure_admin", "--host", "0.0.0.0")  # noqa: S104
    assert "goaai is at http://127.0.0.1:8000/" in everywhere
    assert "Other machines reach it by this machine's name or address" in everywhere


@pytest.mark.django_db
def test_a_url_that_is_no_web_address_is_refused():
    with pytest.raises(CommandError, match="is not an http:// or https:// address"):
        run("ensure_admin", "--url", "goaai.example.com")
    assert not get_user_model().objects.exists()


@pytest.mark.django_db
def test_create_user_creates_a_user_who_can_sign_in_and_is_not_staff():
    out = run("create_user", "alice", "--password", "wonderland-42", "--email", "a@example.com")

    assert out.strip() == "Created the user alice."
    alice = get_user_model().objects.get(username="alice")
    assert alice.check_password("wonderland-42")
    assert (alice.is_staff, alice.is_superuser, alice.email) == (False, False, "a@example.com")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("password", "message"),
    [
        ("short", "too short"),
        ("password123", "too common"),
        ("12345678901", "entirely numeric"),
    ],
)
def test_create_user_refuses_a_weak_password(password, message):
    with pytest.raises(CommandError, match=message):
        run("create_user", "alice", "--password", password)
    assert not get_user_model().objects.exists()


@pytest.mark.django_db
def test_create_user_refuses_a_name_taken_or_empty(owner):
    with pytest.raises(CommandError, match="A user named alice exists already"):
        run("create_user", "alice", "--password", "wonderland-42")
    with pytest.raises(CommandError, match="The username is empty"):
        run("create_user", " ", "--password", "wonderland-42")
    assert get_user_model().objects.count() == 1


@pytest.mark.django_db
def test_create_user_without_a_password_needs_a_terminal(monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    with pytest.raises(CommandError, match="Pass --password"):
        run("create_user", "alice")


@pytest.mark.django_db
def test_create_user_asks_for_the_password_twice_at_a_terminal(monkeypatch):
    terminal = io.StringIO("")
    terminal.isatty = lambda: True  # type: ignore[method-assign]
    monkeypatch.setattr("sys.stdin", terminal)
    typed = iter(["wonderland-42", "wonderland-43"])
    monkeypatch.setattr("getpass.getpass", lambda prompt: next(typed))
    with pytest.raises(CommandError, match="The passwords do not match"):
        run("create_user", "alice")

    typed = iter(["wonderland-42", "wonderland-42"])
    run("create_user", "alice")
    assert get_user_model().objects.get(username="alice").check_password("wonderland-42")
