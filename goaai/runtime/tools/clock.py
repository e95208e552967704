"""The current date and time."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field

from goaai.runtime.tools.base import ToolRejected, tool


def now() -> dt.datetime:
    """The current time; tests replace this to make answers predictable."""
    return dt.datetime.now(tz=dt.UTC)


@tool(idempotent=True)
def clock_now(
    timezone: Annotated[
        str, Field(description="An IANA time zone such as 'Europe/Rome'.", max_length=64)
    ] = "UTC",
) -> dict[str, Any]:
    """The current date and time in a time zone (UTC unless one is given)."""
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ToolRejected(f"Unknown time zone {timezone!r}.") from exc
    current = now().astimezone(zone)
    return {
        "iso": current.isoformat(timespec="seconds"),
        "timezone": timezone,
        "weekday": current.strftime("%A"),
    }
