"""Create the first administrator account if there is none, and print its password once."""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = "Create an administrator account (printing its password once) if none exists."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="admin")
        parser.add_argument("--email", default="admin@localhost")

    def handle(self, *args: Any, **options: Any) -> None:
        users = get_user_model()
        if users.objects.filter(is_superuser=True).exists():
            self.stdout.write("An administrator account exists already; nothing to do.")
            return
        password = secrets.token_urlsafe(12)
        users.objects.create_superuser(
            username=options["username"], email=options["email"], password=password
        )
        self.stdout.write(
            self.style.SUCCESS(
                "Created the administrator account. Its password is shown only this once:\n"
                f"    username: {options['username']}\n"
                f"    password: {password}\n"
                "Sign in at http://127.0.0.1:8000/admin/ and change it there."
            )
        )
