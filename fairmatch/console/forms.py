"""Reading the console's forms: URL-encoded bodies, one value per field."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any
from urllib.parse import parse_qsl

from fastapi import Request

from fairmatch.errors import BadRequest

FORM = "application/x-www-form-urlencoded"


async def read_form(request: Request) -> dict[str, str]:
    """The form's fields (a field sent twice keeps its last value); BadRequest for another body."""
    if request.headers.get("content-type", "").split(";")[0].strip().lower() != FORM:
        raise BadRequest(f"the console's forms are sent as {FORM}")
    try:
        text = (await request.body()).decode()
        return dict(parse_qsl(text, keep_blank_values=True, strict_parsing=False, max_num_fields=200))
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadRequest(f"the form cannot be read: {exc}") from None


def listed(text: str) -> list[str]:
    """A field holding several values, separated by commas or spaces."""
    return [value for value in text.replace(",", " ").split() if value]


def chosen(values: Iterable[tuple[str, str]], several: Collection[str]) -> dict[str, Any]:
    """The fields filled in (blank ones dropped, a field given twice keeps its last value);
    those in `several` gather every value given, each separated by commas or spaces."""
    found: dict[str, Any] = {}
    for name, value in values:
        if name in several:
            found.setdefault(name, []).extend(listed(value))
        elif value.strip():
            found[name] = value.strip()
    return {name: value for name, value in found.items() if value}
