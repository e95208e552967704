"""The forms of the user's settings page: preferences, and a new API token."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django import forms
from django.core.validators import ProhibitNullCharactersValidator

from sessions_app.timezones import time_zones

BROWSER_TIME_ZONE = "Your browser's time zone"

# How long a token made on the settings page works, in days (None: until revoked).
TOKEN_LIFETIMES: dict[str, int | None] = {"7": 7, "30": 30, "90": 90, "365": 365, "never": None}
TOKEN_LIFETIME_LABELS = {
    "7": "7 days",
    "30": "30 days",
    "90": "90 days",
    "365": "1 year",
    "never": "Never (until you revoke it)",
}


class PreferencesForm(forms.Form):
    time_zone = forms.ChoiceField(
        required=False,
        label="Time zone",
        help_text="The zone goaai shows times in. Left as your browser's, it follows "
        "the computer you use.",
    )
    shortcuts_enabled = forms.BooleanField(
        required=False,
        label="Single-key shortcuts",
        help_text="n, /, i, c, m and ? act when you are not typing. Turn them off if "
        "they get in the way of speech input or other tools.",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The zones are read when a form is made, not when goaai starts.
        field: Any = self.fields["time_zone"]
        field.choices = [("", BROWSER_TIME_ZONE), *((zone, zone) for zone in time_zones())]


class TokenForm(forms.Form):
    name = forms.CharField(
        max_length=100,
        label="Name",
        help_text="What the token is for, so that you can tell it apart later.",
        validators=[ProhibitNullCharactersValidator()],
    )
    expires_in = forms.ChoiceField(
        label="Expires in",
        choices=list(TOKEN_LIFETIME_LABELS.items()),
        initial="90",
    )

    def expires_at(self, now: dt.datetime) -> dt.datetime | None:
        """When the token the valid form describes stops working."""
        days = TOKEN_LIFETIMES[self.cleaned_data["expires_in"]]
        return None if days is None else now + dt.timedelta(days=days)
