"""Bounded input types shared by every model that takes outside data."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any

from pydantic import AfterValidator, AwareDatetime, BeforeValidator, Field, Strict, WithJsonSchema

MAX_NAME = 255
MAX_VALUES = 1000

# C0, DEL and C1: every Unicode "Cc" character
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _no_control_characters(value: str) -> str:
    if _CONTROL.search(value):
        raise ValueError("control characters are not allowed")
    if not value.strip():
        raise ValueError("must not be blank")
    try:
        value.encode()
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode text") from None
    return value


def _one_or_many(value: Any) -> Any:
    """DIRAC sends a single string where it means a one-element list."""
    return [value] if isinstance(value, str) else value


# For query parameters, which take a pattern rather than a validator.
NAME_PATTERN = r"^[^\x00-\x1f\x7f-\x9f]+$"

Name = Annotated[
    str,
    Field(min_length=1, max_length=MAX_NAME),
    AfterValidator(_no_control_characters),
]

NameList = Annotated[
    list[Name],
    # the schema says what is accepted: one name, or a list of them
    BeforeValidator(_one_or_many, json_schema_input_type=Name | Annotated[list[Name], Field(max_length=MAX_VALUES)]),
    Field(max_length=MAX_VALUES),
]

# An integer from JSON: true/false are not numbers, and neither are strings.
Int = Annotated[int, Strict()]


MAX_TIME = 64  # an ISO 8601 time with microseconds and a zone is 32 characters
_TIME_SCHEMA = WithJsonSchema({"type": "string", "format": "date-time", "maxLength": MAX_TIME})


def _short_time(value: Any) -> Any:
    if isinstance(value, str) and len(value) > MAX_TIME:
        raise ValueError(f"a time is at most {MAX_TIME} characters")
    return value


# A point in time from outside (ISO 8601), as bounded as every other string; with its zone or not.
Time = Annotated[datetime, BeforeValidator(_short_time), _TIME_SCHEMA]
# The same, its zone required.
Moment = Annotated[AwareDatetime, BeforeValidator(_short_time), _TIME_SCHEMA]
