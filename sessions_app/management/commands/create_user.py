"""Create a user who signs in to the chat and the API (not staff, not an admin).

    python manage.py create_user alice --password wonderland-42
    python manage.py create_user bob            # asks for the password twice

The password must pass the project's password checks (``AUTH_PASSWORD_VALIDATORS``).
"""

from __future__ import annotations

import getpass
import sys
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import IntegrityError


class Command(BaseCommand):
    help = "Create a user who signs in to the chat and the API (not staff)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument(
            "--password", help="the password (asked for, twice, when left out at a terminal)"
        )
        parser.add_argument("--email", default="")

    def handle(self, *args: Any, **options: Any) -> None:
        users = get_user_model()
        username = options["username"].strip()
        if not username:
            raise CommandError("The username is empty.")
        if users.objects.filter(username=username).exists():
            raise CommandError(f"A user named {username} exists already.")
        password = options["password"]
        if password is None:
            password = self._typed_password()
        try:
            validate_password(password, users(username=username, email=options["email"]))
        except ValidationError as exc:
            raise CommandError(" ".join(exc.messages)) from exc
        try:
            users.objects.create_user(username=username, email=options["email"], password=password)
        except IntegrityError as exc:  # created meanwhile, by another process
            raise CommandError(f"A user named {username} exists already.") from exc
        self.stdout.write(self.style.SUCCESS(f"Created the user {username}."))

    @staticmethod
    def _typed_password() -> str:
        if not sys.stdin.isatty():
            raise CommandError("Pass --password, or run this in a terminal to type one.")
        password = getpass.getpass("Password: ")
        if getpass.getpass("Password (again): ") != password:
            raise CommandError("The passwords do not match.")
        return password
