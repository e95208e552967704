"""What the dashboard looks at: a time range and filters, read from the page's
query string by a form that says what is wrong with what it cannot read.

A range runs from one whole hour to another (the rollups' finest period). Its
whole UTC days are read from the daily rollups, the hours at its edges from the
hourly ones, so any range costs about as many rows as it has days.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any

from django import forms
from django.contrib.auth import get_user_model
from django.db.models import Q
from django.utils import timezone

from goaai.admin_base import agent_ids
from goaai.api.filters import json_key_q
from goaai.runtime.vocabulary import RunStatus

HOUR = dt.timedelta(hours=1)
DAY = dt.timedelta(days=1)
RANGES = {"24h": DAY, "7d": 7 * DAY, "30d": 30 * DAY, "90d": 90 * DAY}
# A range up to this long is drawn hour by hour; a longer one day by day.
HOURLY_UP_TO = 2 * DAY
# The longest range the page takes: ten years of days, within these.
LONGEST = 3660 * DAY
FIRST_DAY, LAST_DAY = dt.date(1970, 1, 1), dt.date(9998, 12, 31)
LABEL_KEY = re.compile(r"[\w.-]+")


def floor_hour(moment: dt.datetime) -> dt.datetime:
    return moment.astimezone(dt.UTC).replace(minute=0, second=0, microsecond=0)


@dataclass(frozen=True)
class Scope:
    """The runs the dashboard counts: created from ``since`` to ``until`` (whole
    hours, UTC), of ``agent``, answered by ``model``, owned by ``owner`` (a user
    id; ``username`` for links), labelled ``label`` (``key``, ``value``)."""

    since: dt.datetime
    until: dt.datetime
    agent: str = ""
    model: str = ""
    owner: int | None = None
    username: str = ""
    label: tuple[str, str] | None = None

    @property
    def hourly(self) -> bool:
        return self.until - self.since <= HOURLY_UP_TO

    def rollup_q(self) -> Q:
        """The rollup rows that add up to this scope: days whole inside it, hours
        at its edges (or, drawn hour by hour, hours only); and its filters."""
        first_day = self.since if self.since == _day(self.since) else _day(self.since) + DAY
        last_day = _day(self.until)
        if self.hourly or first_day >= last_day:
            periods = Q(span="hour", period__gte=self.since, period__lt=self.until)
        else:
            periods = (
                Q(span="day", period__gte=first_day, period__lt=last_day)
                | Q(span="hour", period__gte=self.since, period__lt=first_day)
                | Q(span="hour", period__gte=last_day, period__lt=self.until)
            )
        return periods & self.filters_q()

    def filters_q(self, owner: str = "owner_id") -> Q:
        """The agent, model and owner filters (``owner``: the owner's lookup; on a
        rollup, ``owner_id``)."""
        condition = Q()
        if self.agent:
            condition &= Q(agent=self.agent)
        if self.model:
            condition &= Q(model=self.model)
        if self.owner is not None:
            condition &= Q(**{owner: self.owner})
        return condition

    def runs_q(self) -> Q:
        """The runs in scope."""
        return Q(created_at__gte=self.since, created_at__lt=self.until) & self.live_q()

    def live_q(self) -> Q:
        """The scope's filters on runs, whenever they were created."""
        condition = self.filters_q(owner="session__owner_id")
        if self.label is not None:
            key, value = self.label
            condition &= json_key_q("labels", key, value)
        return condition

    def list_params(
        self, *, since: dt.datetime | None = None, until: dt.datetime | None = None
    ) -> dict[str, str]:
        """The runs list's query parameters for this scope (or part of its range)."""
        params: dict[str, str] = {
            "created_at_from": (since or self.since).isoformat(),
            "created_at_until": (until or self.until).isoformat(),
        }
        params.update(self.filter_params())
        return params

    def filter_params(self) -> dict[str, str]:
        params = {}
        if self.agent:
            params["agent"] = self.agent
        if self.model:
            params["model"] = self.model
        if self.username:
            params["owner"] = self.username
        if self.label is not None:
            params["label"] = ":".join(self.label)
        return params


def _day(moment: dt.datetime) -> dt.datetime:
    return moment.replace(hour=0)


class ScopeForm(forms.Form):
    """The dashboard's filters, as the page's query string gives them."""

    range = forms.ChoiceField(
        choices=[(key, f"last {key}") for key in RANGES] + [("custom", "from … until …")],
        required=False,
    )
    since = forms.DateField(required=False, help_text="first day, in your time zone")
    until = forms.DateField(required=False, help_text="last day, in your time zone")
    agent = forms.ChoiceField(required=False)
    model = forms.CharField(required=False, max_length=200)
    owner = forms.CharField(required=False, max_length=150, label="User")
    label = forms.CharField(required=False, max_length=300, help_text="key:value")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        agents = sorted(set(agent_ids()))
        self.fields["agent"].choices = [("", "every agent"), *((a, a) for a in agents)]  # type: ignore[attr-defined]

    def clean_owner(self) -> str:
        username: str = self.cleaned_data["owner"].strip()
        if username and not get_user_model()._default_manager.filter(username=username).exists():
            raise forms.ValidationError(f"No user is named {username!r}.")
        return username

    def clean_label(self) -> tuple[str, str] | None:
        text = self.cleaned_data["label"].strip()
        if not text:
            return None
        key, sep, value = (part.strip() for part in text.partition(":"))
        if not sep or not LABEL_KEY.fullmatch(key) or "__" in key:
            raise forms.ValidationError(
                "Type a label as key:value, e.g. tier:free (the key in letters, digits, _ . -)."
            )
        return key, value

    def _clean_day(self, name: str) -> dt.date | None:
        day: dt.date | None = self.cleaned_data[name]
        if day is not None and not FIRST_DAY <= day <= LAST_DAY:
            raise forms.ValidationError(
                f"Pick a day from {FIRST_DAY.isoformat()} to {LAST_DAY.isoformat()}."
            )
        return day

    def clean_since(self) -> dt.date | None:
        return self._clean_day("since")

    def clean_until(self) -> dt.date | None:
        return self._clean_day("until")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        since, until = data.get("since"), data.get("until")
        if (since or until) and data.get("range") not in ("", "custom", None):
            return data  # a preset wins over dates left in the form
        if since and until and until < since:
            self.add_error("until", "The last day comes before the first.")
        return data

    def scope(self, now: dt.datetime | None = None) -> Scope:
        """The scope the valid form names (last 24 hours when it names none)."""
        data = self.cleaned_data
        end = floor_hour(now or timezone.now()) + HOUR
        chosen = data.get("range") or ("custom" if data.get("since") else "24h")
        if chosen == "custom":
            since, until = self._days(data.get("since"), data.get("until"), end)
        else:
            since, until = end - RANGES[chosen], end
        username = data.get("owner") or ""
        owner = None
        if username:
            owner = get_user_model()._default_manager.get(username=username).pk
        return Scope(
            since=since,
            until=until,
            agent=data.get("agent") or "",
            model=(data.get("model") or "").strip(),
            owner=owner,
            username=username,
            label=data.get("label"),
        )

    @staticmethod
    def _days(
        first: dt.date | None, last: dt.date | None, end: dt.datetime
    ) -> tuple[dt.datetime, dt.datetime]:
        """From the first day's start to the last day's end, in the viewer's time
        zone, on whole hours; the missing end is now, the missing start a day back."""
        zone = timezone.get_current_timezone()
        until = end
        if last is not None:
            until = floor_hour(dt.datetime.combine(last + DAY, dt.time(), tzinfo=zone))
        since = until - DAY
        if first is not None:
            since = floor_hour(dt.datetime.combine(first, dt.time(), tzinfo=zone))
        since = max(since, until - LONGEST)
        return since, max(until, since + HOUR)


ENDED_ORDER = [RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.TIMED_OUT, RunStatus.CANCELED]
