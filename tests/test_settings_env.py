"""Settings come from the environment, and production refuses to start unsafe."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from goaai.env import env_bool, env_database, env_int, env_list, env_str

PROJECT_ROOT = Path(__file__).resolve().parent.parent


# The helpers


@pytest.mark.parametrize("raw", ["1", "true", "TRUE", "yes", "on", " True "])
def test_env_bool_reads_yes(monkeypatch, raw):
    monkeypatch.setenv("GOAAI_FLAG", raw)
    assert env_bool("GOAAI_FLAG") is True


@pytest.mark.parametrize("raw", ["0", "false", "No", "off", ""])
def test_env_bool_reads_no(monkeypatch, raw):
    monkeypatch.setenv("GOAAI_FLAG", raw)
    assert env_bool("GOAAI_FLAG", default=True) is False


@pytest.mark.parametrize("raw", ["2", "maybe", "enabled", "y e s"])
def test_env_bool_rejects_anything_else(monkeypatch, raw):
    monkeypatch.setenv("GOAAI_FLAG", raw)
    with pytest.raises(ImproperlyConfigured, match="GOAAI_FLAG must be a boolean"):
        env_bool("GOAAI_FLAG")


def test_env_bool_uses_the_default_when_unset(monkeypatch):
    monkeypatch.delenv("GOAAI_FLAG", raising=False)
    assert env_bool("GOAAI_FLAG") is False
    assert env_bool("GOAAI_FLAG", default=True) is True


def test_env_int_str_and_list(monkeypatch):
    monkeypatch.setenv("GOAAI_N", "12")
    monkeypatch.setenv("GOAAI_EMPTY", "  ")
    monkeypatch.setenv("GOAAI_HOSTS", " a.example, ,b.example ,")
    monkeypatch.delenv("GOAAI_UNSET", raising=False)

    assert env_int("GOAAI_N", 3) == 12
    assert env_int("GOAAI_EMPTY", 3) == 3
    assert env_str("GOAAI_UNSET", "fallback") == "fallback"
    assert env_list("GOAAI_HOSTS") == ["a.example", "b.example"]
    assert env_list("GOAAI_UNSET", ["x"]) == ["x"]


def test_env_int_rejects_garbage(monkeypatch):
    monkeypatch.setenv("GOAAI_N", "twelve")
    with pytest.raises(ImproperlyConfigured, match="GOAAI_N must be an integer"):
        env_int("GOAAI_N", 3)


def test_env_database_sets_up_sqlite_for_concurrent_writers(monkeypatch, tmp_path):
    monkeypatch.delenv("GOAAI_DB", raising=False)

    config = env_database("GOAAI_DB", default=f"sqlite:///{tmp_path / 'db.sqlite3'}")

    # Django's backend, with closed connections kept for reuse.
    assert config["ENGINE"] == "goaai.sqlite"
    assert config["NAME"] == str(tmp_path / "db.sqlite3")
    assert config["OPTIONS"]["transaction_mode"] == "IMMEDIATE"
    assert config["OPTIONS"]["timeout"] == 20
    assert "journal_mode=WAL" in config["OPTIONS"]["init_command"]
    assert "foreign_keys=ON" in config["OPTIONS"]["init_command"]
    assert "pool" not in config["OPTIONS"]


def test_env_database_sqlite_keeps_no_connections_without_a_pool(monkeypatch, tmp_path):
    monkeypatch.setenv("DATABASE_POOL", "0")
    config = env_database("GOAAI_DB", default=f"sqlite:///{tmp_path / 'db.sqlite3'}")
    assert config["OPTIONS"]["pool"] is False


def test_env_database_gives_postgres_a_connection_pool(monkeypatch):
    monkeypatch.setenv("GOAAI_DB", "postgres://goaai:secret@db.example:6543/goaai")
    monkeypatch.setenv("DATABASE_POOL_MAX", "25")
    monkeypatch.delenv("DATABASE_POOL", raising=False)
    monkeypatch.delenv("DATABASE_POOL_MIN", raising=False)

    config = env_database("GOAAI_DB", default="sqlite:///unused.sqlite3")

    # Django's backend, with a cheaper check of pooled connections.
    assert config["ENGINE"] == "goaai.postgresql"
    assert (config["NAME"], config["USER"], config["PASSWORD"]) == ("goaai", "goaai", "secret")
    assert (config["HOST"], config["PORT"]) == ("db.example", 6543)
    assert config["OPTIONS"]["pool"] == {"min_size": 1, "max_size": 25, "timeout": 10}
    # Every connection the pool hands out is checked first (the server may have
    # dropped it while it waited).
    assert config["CONN_HEALTH_CHECKS"] is True
    # A pool and persistent connections exclude each other.
    assert config["CONN_MAX_AGE"] == 0
    assert "transaction_mode" not in config["OPTIONS"]


def test_env_database_pool_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("GOAAI_DB", "postgresql://postgres@127.0.0.1:5432/goaai")
    monkeypatch.setenv("DATABASE_POOL", "0")

    config = env_database("GOAAI_DB", default="sqlite:///unused.sqlite3")

    assert "pool" not in config["OPTIONS"]
    assert config["CONN_MAX_AGE"] == 0


def test_env_database_rejects_a_url_it_cannot_read(monkeypatch):
    monkeypatch.setenv("GOAAI_DB", "nosuchdb://what")
    with pytest.raises(ImproperlyConfigured, match="GOAAI_DB is not a database URL"):
        env_database("GOAAI_DB", default="sqlite:///unused.sqlite3")


# Production refuses to start unsafe

SETUP = (
    "import os, django; "
    "os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'goaai.settings'); "
    "django.setup(); "
    "from django.conf import settings; "
    "print('DEBUG', settings.DEBUG, settings.ALLOWED_HOSTS)"
)


def _start_django(**env: str) -> subprocess.CompletedProcess[str]:
    environment = {
        key: value
        for key, value in os.environ.items()
        if key not in {"SECRET_KEY", "DEBUG", "GOAAI_PRODUCTION", "ALLOWED_HOSTS"}
    }
    environment["DJANGO_SETTINGS_MODULE"] = "goaai.settings"
    environment.update(env)
    return subprocess.run(  # noqa: S603 - our own interpreter, a fixed script
        [sys.executable, "-c", SETUP],
        cwd=PROJECT_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_production_refuses_debug():
    started = _start_django(GOAAI_PRODUCTION="1", DEBUG="1", SECRET_KEY="s" * 50)

    assert started.returncode != 0
    assert "ImproperlyConfigured" in started.stderr
    assert "DEBUG must be off" in started.stderr


def test_production_refuses_to_start_without_a_secret_key():
    started = _start_django(GOAAI_PRODUCTION="1")

    assert started.returncode != 0
    assert "ImproperlyConfigured" in started.stderr
    assert "SECRET_KEY must be set" in started.stderr


def test_production_refuses_a_short_secret_key():
    started = _start_django(GOAAI_PRODUCTION="1", DEBUG="0", SECRET_KEY="short-secret")

    assert started.returncode != 0
    assert "at least 32 characters" in started.stderr


def test_production_starts_with_a_secret_key_and_debug_off():
    started = _start_django(
        GOAAI_PRODUCTION="1",
        DEBUG="0",
        SECRET_KEY="k" * 50,
        ALLOWED_HOSTS="example.com",
    )

    assert started.returncode == 0, started.stderr
    assert "DEBUG False ['example.com']" in started.stdout
