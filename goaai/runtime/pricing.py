"""What a model reply costs, from a price per million tokens of each kind.

Prices live with the deployment (goaai's admin keeps a dated table); a store looks
up the price in force when it records a turn and stores the cost with it, so that a
later price change rewrites no history.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from goaai.runtime.types import Usage

# Costs are kept to a ten-billionth of a dollar: a single token of the cheapest
# models costs more than that.
COST_PLACES = Decimal("0.0000000001")
_MILLION = Decimal(1_000_000)


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens. A kind without its own price costs what its
    parent kind does: cache reads and writes the input price, reasoning the output
    price."""

    input: Decimal
    output: Decimal
    cached_input: Decimal | None = None
    cache_write: Decimal | None = None
    reasoning: Decimal | None = None


def cost_of(usage: Usage, price: Price) -> Decimal:
    """The cost of ``usage`` at ``price``, in dollars (exact, then rounded to
    :data:`COST_PLACES`)."""
    reasoning = min(usage.reasoning_tokens, usage.output_tokens)
    total = (
        usage.input_tokens * price.input
        + usage.cached_input_tokens * _or(price.cached_input, price.input)
        + usage.cache_write_tokens * _or(price.cache_write, price.input)
        + (usage.output_tokens - reasoning) * price.output
        + reasoning * _or(price.reasoning, price.output)
    )
    return (total / _MILLION).quantize(COST_PLACES)


def _or(value: Decimal | None, fallback: Decimal) -> Decimal:
    return fallback if value is None else value
