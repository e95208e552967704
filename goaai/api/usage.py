"""Token usage and cost as the API shows them, for a turn, a run, a session or a
group of runs: every kind of token apart, and the cost in US dollars as an exact
decimal string (JSON numbers would round it)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from rest_framework import serializers

from goaai.runtime.payloads import cost_text
from goaai.runtime.types import USAGE_KINDS, known_cost

COST_HELP = (
    'US dollars, as an exact decimal string (e.g. "0.0123"), by the prices in force '
    "when each turn was recorded; null when the cost is unknown (no turn had a price)."
)


class UsageSerializer(serializers.Serializer):  # type: ignore[type-arg]
    input_tokens = serializers.IntegerField(
        help_text="Prompt tokens at the full price: neither read from the provider's "
        "prompt cache nor written to it."
    )
    output_tokens = serializers.IntegerField(help_text="Tokens of the replies, reasoning included.")
    cached_input_tokens = serializers.IntegerField(
        help_text="Prompt tokens read from the provider's prompt cache."
    )
    cache_write_tokens = serializers.IntegerField(
        help_text="Prompt tokens written to the provider's prompt cache."
    )
    reasoning_tokens = serializers.IntegerField(
        help_text="The part of output_tokens the model spent reasoning."
    )
    total_tokens = serializers.IntegerField(
        help_text="input + cached_input + cache_write + output tokens."
    )
    cost = serializers.CharField(allow_null=True, help_text=COST_HELP)


class RunUsageSerializer(UsageSerializer):
    unpriced_turns = serializers.IntegerField(
        help_text="How many of the turns summed had no price: their cost is not in `cost`."
    )


def usage_document(row: Any) -> dict[str, Any]:
    """The usage of a row that sums turns (a run, or an annotated session or group):
    it has a field for each token kind, ``total_tokens``, ``cost`` (every priced
    turn's) and ``unpriced_turns``."""
    data: dict[str, Any] = {kind: int(getattr(row, kind) or 0) for kind in USAGE_KINDS}
    data["total_tokens"] = int(row.total_tokens or 0)
    unpriced = int(row.unpriced_turns or 0)
    data["cost"] = cost_text(known_cost(Decimal(row.cost or 0), unpriced))
    data["unpriced_turns"] = unpriced
    return data


def turn_usage_document(turn: Any) -> dict[str, Any]:
    """The usage of one turn; its cost is null when its model had no price."""
    data: dict[str, Any] = {kind: getattr(turn, kind) for kind in USAGE_KINDS}
    data["total_tokens"] = (
        turn.input_tokens + turn.cached_input_tokens + turn.cache_write_tokens + turn.output_tokens
    )
    data["cost"] = cost_text(turn.cost)
    return data
