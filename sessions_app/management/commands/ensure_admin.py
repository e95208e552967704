"""Create the first administrator account if there is none, and print its password once.

It also says where goaai is reached (``--host``/``--port`` as the server binds
them, or ``--url`` when a proxy stands in front), and warns when that host is not
one ``ALLOWED_HOSTS`` lets in.
"""

from __future__ import annotations

import ipaddress
import secrets
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.http.request import validate_host

# Addresses a server binds to mean "every interface": a browser on this machine
# reaches them on the loopback address.
_EVERY_INTERFACE = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}  # noqa: S104


def site_url(host: str, port: int) -> str:
    """The address a browser on this machine opens for a server bound to ``host``
    and ``port``."""
    host = _EVERY_INTERFACE.get(host, host)
    try:
        literal = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return f"http://{host}:{port}/"
    shown = f"[{literal}]" if literal.version == 6 else str(literal)
    return f"http://{shown}:{port}/"


class Command(BaseCommand):
    help = (
        "Create an administrator account (printing its password once) if none exists, "
        "and say where goaai is reached."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="admin")
        parser.add_argument("--email", default="admin@localhost")
        parser.add_argument("--host", default="127.0.0.1", help="the address the server binds")
        parser.add_argument("--port", type=int, default=8000, help="the port the server binds")
        parser.add_argument(
            "--url", default="", help="the address people use, when it is not the server's own"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        url = options["url"] or site_url(options["host"], options["port"])
        if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).hostname:
            raise CommandError(f"--url {url!r} is not an http:// or https:// address.")
        url = url.rstrip("/") + "/"
        users = get_user_model()
        if users.objects.filter(is_superuser=True).exists():
            self.stdout.write("An administrator account exists already; nothing to do.")
        else:
            password = secrets.token_urlsafe(12)
            users.objects.create_superuser(
                username=options["username"], email=options["email"], password=password
            )
            self.stdout.write(
                self.style.SUCCESS(
                    "Created the administrator account. Its password is shown only this once:\n"
                    f"    username: {options['username']}\n"
                    f"    password: {password}\n"
                    f"Sign in at {url}admin/ and change it there."
                )
            )
        self.stdout.write(f"goaai is at {url} (the admin at {url}admin/)")
        self._check_allowed(options["host"], url)

    def _check_allowed(self, bound: str, url: str) -> None:
        host = urlsplit(url).hostname or ""
        shown = f"[{host}]" if ":" in host else host
        if not validate_host(shown, settings.ALLOWED_HOSTS):
            self.stdout.write(
                self.style.WARNING(
                    f"ALLOWED_HOSTS ({','.join(settings.ALLOWED_HOSTS) or 'empty'}) does not "
                    f"let {shown} in: requests for it are refused (400). Add it, e.g. "
                    f"ALLOWED_HOSTS={shown},localhost."
                )
            )
        elif bound in _EVERY_INTERFACE:
            self.stdout.write(
                "Other machines reach it by this machine's name or address, once that is "
                "in ALLOWED_HOSTS (comma-separated)."
            )
