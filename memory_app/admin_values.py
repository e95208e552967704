"""Memory values in the operators' console: typed as plain text or JSON, shown cut
to one line in the lists, and each revision's change against the one before it (a
diff on the revision's page, a one-line summary in the list)."""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Iterator
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.forms.fields import InvalidJSONInput, JSONString
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from goaai.admin_cells import one_line

# Typing


class _NotJSON(ValueError):
    pass


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):  # 1e999: no JSON number holds it
        raise _NotJSON(text)
    return number


def _refuse_constant(name: str) -> Any:
    raise _NotJSON(name)  # NaN, Infinity: Python reads them, JSON has none


def _as_json(text: str) -> Any:
    """The JSON value ``text`` is; :class:`_NotJSON` when it is none (Python's
    reader takes NaN, Infinity and 1e999 as numbers that JSON does not have)."""
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite)
    except ValueError as error:  # JSONDecodeError is a ValueError
        raise _NotJSON(text) from error


def reads_as_json(text: str) -> bool:
    """Whether ``text``, typed into the value box, would be read as JSON."""
    try:
        _as_json(text)
    except _NotJSON:
        return False
    return True


class MemoryValueField(forms.JSONField):
    """A memory value as an operator types it: what reads as JSON is kept as that
    JSON (``42``, ``true``, ``{"a": 1}``, ``"quoted text"``); anything else is kept as
    the text typed (``Rex`` is stored as the JSON string ``"Rex"``).

    A string value is shown as its text, unless that text would read as JSON (the
    string ``"42"``), starts or ends with spaces, or is empty: then it is shown
    quoted, so that saving the page again keeps it exactly."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault(
            "help_text",
            'Plain text, or JSON: 42, true, ["a", "b"], {"k": 1} and "quoted text" are '
            "kept as JSON; anything else is kept as the text typed.",
        )
        super().__init__(**kwargs)

    def to_python(self, value: Any) -> Any:
        if self.disabled:
            return value
        if value in self.empty_values:
            return None
        if isinstance(value, list | dict | int | float | JSONString):
            return value
        # A text box sends its lines ended by CRLF, and the spaces around what was
        # typed are the box's, not the value's.
        text = str(value).replace("\r\n", "\n").strip()
        if not text:
            return None
        try:
            converted = _as_json(text)
        except _NotJSON:
            return JSONString(text)
        return JSONString(converted) if isinstance(converted, str) else converted

    def bound_data(self, data: Any, initial: Any) -> Any:
        # A form shown again (an error elsewhere on it) keeps the text as typed.
        if self.disabled:
            return initial
        return None if data is None else InvalidJSONInput(data)

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, InvalidJSONInput):
            return value
        if value is None:  # a new entry's box starts empty, not "null"
            return ""
        if isinstance(value, str) and value and value == value.strip() and not reads_as_json(value):
            return value
        return super().prepare_value(value)

    def validate(self, value: Any) -> None:
        # [], {} and "" are values to keep; only an empty box is no value.
        if value is None and self.required:
            raise ValidationError(self.error_messages["required"], code="required")


# Showing


def value_text(value: Any) -> str:
    """A value as text to read and compare line by line: a string as itself, any
    other value as indented JSON; nothing (a deleted entry) as no text at all."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False)


def _diff_lines(before: Any, after: Any) -> Iterator[tuple[str, str]]:
    """The lines of a unified diff from ``before`` to ``after``, each with its kind
    (``hunk``, ``added``, ``removed``, ``same``), without the file header."""
    lines = difflib.unified_diff(
        value_text(before).splitlines(), value_text(after).splitlines(), lineterm="", n=3
    )
    for line in lines:
        if line.startswith(("---", "+++")):
            continue
        if line.startswith("@@"):
            yield "hunk", line
        elif line.startswith("+"):
            yield "added", line
        elif line.startswith("-"):
            yield "removed", line
        else:
            yield "same", line


def diff_html(before: Any, after: Any) -> SafeString:
    """What changed from ``before`` to ``after``, as a diff the page colours line by
    line (added, removed, and the lines around them)."""
    lines = list(_diff_lines(before, after))
    if not lines:
        return format_html('<p class="goaai-diff-none">{}</p>', "No change in the value.")
    rows = format_html_join("", '<span class="goaai-diff-{}">{}</span>', lines)
    return format_html('<pre class="goaai-diff">{}</pre>', rows)


# Two values this short, on one line each, are summed up as "before → after".
_SIDE_BY_SIDE = 60


def change_summary(action: str, before: Any, after: Any, *, had_before: bool) -> str:
    """A revision's change in one line: ``"green" → "blue"``, ``set to 42``,
    ``deleted (was "blue")`` or, for values of many lines, ``+3 -1 lines`` (with a minus sign)."""
    if action == "deleted":
        return f"deleted (was {one_line(before, _SIDE_BY_SIDE)})" if had_before else "deleted"
    if not had_before:
        return f"set to {one_line(after, _SIDE_BY_SIDE)}"
    if value_text(before) == value_text(after):
        return "value unchanged"
    # Two short values, each on one line as they are (not once joined into one).
    compact = [value if isinstance(value, str) else one_line(value) for value in (before, after)]
    if all(len(text) <= _SIDE_BY_SIDE and "\n" not in text for text in compact):
        return f"{compact[0]} → {compact[1]}"
    kinds = [kind for kind, _ in _diff_lines(before, after)]
    return f"+{kinds.count('added')} \u2212{kinds.count('removed')} lines"
