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


def clean_name(value: str) -> str:
    """A name as stored: without the spaces around it (`"  alice  "` is `alice`, one owner, one
    fair-share entity), never blank, without control characters. Every name that enters
    (API bodies, paths and filters, settings, imported trees) passes here."""
    if _CONTROL.search(value):
        raise ValueError("control characters are not allowed")
    value = value.strip()
    if not value:
        raise ValueError("must not be blank")
    try:
        value.encode()
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode text") from None
    return value


def _no_separator(value: str) -> str:
    if SEPARATOR in value:
        raise ValueError(
            f"a name holds no {SEPARATOR!r}: it separates the names of a list written as one string "
            "(send several names as a list, or as such a string)"
        )
    return value


def names_from_text(value: Any) -> Any:
    """DIRAC's names written as one string, as its pilots send tags and its configuration holds
    lists: separated by commas, in optional brackets, each stripped of spaces and quotes
    (`"LCG.CERN.cern, LCG.RAL.uk"`, `"['GPU', '8Processors']"`); `""` is no name. A string
    longer than any list written out is left to fail as not a list."""
    if not isinstance(value, str) or len(value) > MAX_NAMES_TEXT:
        return value
    items = (item.strip("\"' ") for item in value.strip(" ").strip("[]").split(SEPARATOR))
    return [item for item in items if item]


# For what is checked by a pattern rather than a validator (a cursor's reference, as stored)
NAME_PATTERN = r"^[^\x00-\x1f\x7f-\x9f]+$"
SEPARATOR = ","
# names as one string: as long as the longest list, written out with separators and quotes
MAX_NAMES_TEXT = MAX_VALUES * (MAX_NAME + 4)

Name = Annotated[
    str,
    Field(min_length=1, max_length=MAX_NAME),
    AfterValidator(clean_name),
]
# a name that may stand in a list: without the comma that separates listed names
ListedName = Annotated[Name, AfterValidator(_no_separator)]

_NAMES_TEXT = Annotated[str, Field(max_length=MAX_NAMES_TEXT)]
NameList = Annotated[
    list[ListedName],
    # the schema says what is accepted: a list of names, or one string of them
    BeforeValidator(
        names_from_text,
        json_schema_input_type=_NAMES_TEXT | Annotated[list[ListedName], Field(max_length=MAX_VALUES)],
    ),
    Field(max_length=MAX_VALUES),
]
# what the descriptions of list fields say of the forms they take
NAMES_TEXT_FORMS = (
    'A list of names, or one string of them separated by commas (`"A, B"`, DIRAC\'s form: optional '
    'brackets, quotes and spaces around each name dropped; `""` is none). No name holds a comma.'
)

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
