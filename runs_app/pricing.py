"""The price table (:class:`runs_app.models.ModelPrice`) applied to a turn's usage.

A turn's cost is computed once, when its reply is recorded, with the price in force
at that moment, and stored with the turn; the run adds it up. Models of the offline
``scripted`` client and of profiles without a price cost nothing that goaai knows:
their turns are counted as unpriced ("cost unknown"), not as free.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from django.db.models import CharField, DateTimeField

from goaai import sql
from goaai.runtime.pricing import Price, cost_of
from goaai.runtime.types import Usage
from runs_app.models import ModelPrice

_IN_FORCE = sql.Prepared(
    lambda: (
        ModelPrice.objects.filter(
            profile=sql.Slot("profile", CharField()),
            model=sql.Slot("model", CharField()),
            effective_from__lte=sql.Slot("at", DateTimeField()),
        )
        .order_by("-effective_from")
        .values_list(
            "input_per_million",
            "output_per_million",
            "cached_input_per_million",
            "cache_write_per_million",
            "reasoning_per_million",
        )[:1]
    )
)


def price_in_force(profile: str, model: str, at: dt.datetime) -> Price | None:
    """The price of ``profile``'s ``model`` at ``at``: the latest that took effect by
    then, or ``None`` (every turn's reply asks: a statement built once)."""
    row = _IN_FORCE.first(profile=profile, model=model, at=at)
    return None if row is None else Price(*row)


def turn_cost(model: str, usage: Usage, at: dt.datetime) -> Decimal | None:
    """What a turn of ``model`` (``<profile>:<model>``, as the agent names it) with
    ``usage`` cost at ``at``; ``None`` when the model has no price then."""
    profile, _, name = model.partition(":")
    if not name:
        return None
    price = price_in_force(profile, name, at)
    return None if price is None else cost_of(usage, price)
