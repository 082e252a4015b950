"""Text from the code made safe for Markdown: tables and raw `<…>` outside code spans."""

from __future__ import annotations

import html
from collections.abc import Callable


def _outside_code(text: str, change: Callable[[str], str]) -> str:
    parts = text.split("`")
    for index in range(0, len(parts), 2):  # even parts lie outside code spans
        parts[index] = change(parts[index])
    return "`".join(parts)


def escape(text: str) -> str:
    """HTML-escape `<`, `>` and `&` outside code spans, so that `<name>` shows as written."""
    return _outside_code(text, lambda part: html.escape(part, quote=False))


def cell(text: str) -> str:
    """One table cell: a single line, its pipes escaped (a code span keeps its own: the table
    extension does not split inside one)."""
    return _outside_code(" ".join(str(text).split()), lambda part: html.escape(part, quote=False).replace("|", "\\|"))
