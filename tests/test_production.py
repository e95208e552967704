"""Production mode as the README documents it, each case in a fresh interpreter
(settings are read from the environment once, when Django starts): `check
--deploy` has nothing to say, https is enforced (HSTS, the redirect, the TLS
proxy's header), sign-in works behind the proxy, and every page, the 404 page
included, is served without a `collectstatic` step."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parent.parent
PUBLIC = "https://goaai.example.com"
HOST = "goaai.example.com"


def documented_environment(tmp_path: Path) -> dict[str, str]:
    """The production environment of the README's table (the database and the
    static folder of this test)."""
    return {
        "GOAAI_PRODUCTION": "1",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "GOAAI_PUBLIC_URL": PUBLIC,
        "GOAAI_BEHIND_TLS_PROXY": "1",
        "GOAAI_HSTS_PRELOAD": "1",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'production.sqlite3'}",
        # Empty: nothing was collected.
        "STATIC_ROOT": str(tmp_path / "static"),
    }


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    inherited = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("GOAAI_", "DJANGO_", "SECURE_"))
        and key not in {"SECRET_KEY", "DEBUG", "ALLOWED_HOSTS", "DATABASE_URL", "REDIS_URL"}
        and key not in {"CSRF_TRUSTED_ORIGINS", "STATIC_ROOT"}
    }
    return subprocess.run(  # noqa: S603 - our own interpreter, fixed arguments
        [sys.executable, *args],
        cwd=PROJECT_ROOT,
        env={**inherited, "DJANGO_SETTINGS_MODULE": "goaai.settings", **env},
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


# What a browser behind the TLS proxy does, told as JSON for the test to read.
PROBE = r"""
import json, re, sys, django
django.setup()
from django.core.management import call_command
from django.contrib.auth import get_user_model
from django.test import Client

https = {"HTTP_X_FORWARDED_PROTO": "https", "HTTP_HOST": "goaai.example.com"}
seen = {}

plain = Client().get("/accounts/login/", HTTP_HOST="goaai.example.com")
seen["plain"] = [plain.status_code, plain.get("Location", "")]
probe = Client().get("/healthz", HTTP_HOST="goaai.example.com")
seen["probe"] = probe.status_code

browser = Client(enforce_csrf_checks=True)
login = browser.get("/accounts/login/", **https)
seen["login"] = [login.status_code, login.get("Strict-Transport-Security", ""),
                 login.get("Content-Security-Policy", "")]
sheet = re.search(r'href="(/static/[^"]+\.css)"', login.content.decode()).group(1)
css = browser.get(sheet, **https)
seen["stylesheet"] = [sheet, css.status_code]
script = browser.get("/static/sessions_app/js/chat.js", **https)
seen["script"] = script.status_code
missing = browser.get("/no/such/page/", **https)
seen["not_found"] = [missing.status_code, "Not found" in missing.content.decode()]
if sys.argv[-1] != "sign-in":
    print("PROBE " + json.dumps(seen))
    sys.exit(0)
call_command("migrate", verbosity=0)
get_user_model().objects.create_user("alice", password="correct horse battery staple")
signed_in = browser.post(
    "/accounts/login/",
    {"username": "alice", "password": "correct horse battery staple",
     "csrfmiddlewaretoken": browser.cookies["csrftoken"].value},
    HTTP_ORIGIN="https://goaai.example.com",
    HTTP_REFERER="https://goaai.example.com/accounts/login/",
    **https,
)
seen["sign_in"] = [signed_in.status_code, signed_in.get("Location", "")]
chats = browser.get("/", **https)
seen["chats"] = chats.status_code
print("PROBE " + json.dumps(seen))
"""


def _probe(env: dict[str, str], *, sign_in: bool = False) -> dict:
    ran = _run(["-c", PROBE, "sign-in" if sign_in else "pages"], env)
    assert ran.returncode == 0, ran.stderr[-3000:]
    line = next(line for line in ran.stdout.splitlines() if line.startswith("PROBE "))
    return json.loads(line.removeprefix("PROBE "))


def test_check_deploy_has_nothing_to_say_with_the_documented_environment(tmp_path):
    ran = _run(
        ["manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        documented_environment(tmp_path),
    )

    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "System check identified no issues" in ran.stdout
    assert "WARNING" not in ran.stdout + ran.stderr


def test_without_preloading_check_deploy_names_only_that(tmp_path):
    env = documented_environment(tmp_path)
    del env["GOAAI_HSTS_PRELOAD"]

    ran = _run(["manage.py", "check", "--deploy"], env)

    assert "security.W021" in ran.stdout + ran.stderr
    assert "W004" not in ran.stdout + ran.stderr
    assert "W008" not in ran.stdout + ran.stderr


def test_production_behind_the_tls_proxy(tmp_path):
    seen = _probe(documented_environment(tmp_path), sign_in=True)

    # Plain http is sent to https; probes from inside are not.
    assert seen["plain"] == [301, f"{PUBLIC}/accounts/login/"]
    assert seen["probe"] == 200
    status, hsts, csp = seen["login"]
    assert status == 200
    assert hsts == "max-age=31536000; includeSubDomains; preload"
    assert "script-src 'self'" in csp
    # Static files and the 404 page without collectstatic.
    assert seen["stylesheet"][1] == 200, seen["stylesheet"]
    assert seen["script"] == 200
    assert seen["not_found"] == [404, True]
    # Signing in is not a CSRF 403 behind the proxy.
    assert seen["sign_in"] == [302, "/"]
    assert seen["chats"] == 200


def test_the_proxy_header_is_not_trusted_without_a_proxy(tmp_path):
    env = documented_environment(tmp_path)
    del env["GOAAI_BEHIND_TLS_PROXY"]

    seen = _probe({**env, "GOAAI_SSL_REDIRECT": "0"})

    # A client's own X-Forwarded-Proto does not make its request secure.
    assert seen["login"][0] == 200
    assert seen["login"][1] == ""


def test_hsts_comes_from_the_environment(tmp_path):
    env = {
        **documented_environment(tmp_path),
        "GOAAI_HSTS_SECONDS": "600",
        "GOAAI_HSTS_INCLUDE_SUBDOMAINS": "0",
        "GOAAI_HSTS_PRELOAD": "0",
    }

    seen = _probe(env)

    assert seen["login"][1] == "max-age=600"


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("GOAAI_PUBLIC_URL", "goaai.example.com", "GOAAI_PUBLIC_URL must be an http(s) URL"),
        ("GOAAI_PROXY_SSL_HEADER", "X-Forwarded-Proto", "GOAAI_PROXY_SSL_HEADER must be"),
    ],
)
def test_a_malformed_setting_stops_the_start(tmp_path, name, value, message):
    ran = _run(["manage.py", "check"], {**documented_environment(tmp_path), name: value})

    assert ran.returncode != 0
    assert message in ran.stderr
