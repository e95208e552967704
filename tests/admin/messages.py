"""What the console's pages tell the operator: the messages above their content."""

from __future__ import annotations

import html
import re
from typing import Any

_MESSAGE = re.compile(r'<li class="([^"]*)">(.*?)</li>', re.S)


def page_messages(response: Any) -> list[tuple[str, str]]:
    """The messages a page shows, as (level, text)."""
    content = response.content.decode()
    start = content.find('<ul class="messagelist">')
    if start < 0:
        return []
    block = content[start : content.index("</ul>", start)]
    return [(level, html.unescape(text).strip()) for level, text in _MESSAGE.findall(block)]


def error_messages(response: Any) -> list[str]:
    return [text for level, text in page_messages(response) if level == "error"]
