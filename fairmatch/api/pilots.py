"""/pilots: the pilots on record (DIRAC's PilotAgentsDB), as their matches left them."""

from __future__ import annotations

import base64
import binascii
import re
from datetime import UTC, datetime
from typing import Annotated

import orjson
from fastapi import APIRouter, Path, Query
from pydantic import BaseModel, ConfigDict, Field

from fairmatch.api.deps import Connection, PilotsAndOperators
from fairmatch.api.schemas import Pilot, PilotPage
from fairmatch.auth.tokens import Principal
from fairmatch.db.pilots import Cursor, PilotFilter
from fairmatch.errors import BadRequest, InvalidInput
from fairmatch.fields import MAX_NAME, NAME_PATTERN, Name, Time
from fairmatch.services import pilots as pilot_service

router = APIRouter(prefix="/pilots", tags=["pilots"])

MAX_CURSOR = 2048  # a timestamp and a reference of up to 255 characters, encoded
NAME = re.compile(NAME_PATTERN)


def encode_cursor(after: Cursor) -> str:
    text = orjson.dumps([after[0].isoformat(), after[1]])
    return base64.urlsafe_b64encode(text).decode().rstrip("=")


def decode_cursor(cursor: str) -> Cursor:
    try:
        stamp, reference = orjson.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        first_seen = datetime.fromisoformat(stamp)
        if not (isinstance(reference, str) and len(reference) <= MAX_NAME and NAME.match(reference)):
            raise ValueError(cursor)
        if first_seen.tzinfo is None:
            raise ValueError(cursor)
        return first_seen.astimezone(UTC), reference
    except (ValueError, TypeError, OverflowError, binascii.Error, orjson.JSONDecodeError):
        raise BadRequest("cursor is not one this service gave out") from None


class PilotQuery(BaseModel):
    """The listing's filters; any other query parameter is refused (422)."""

    model_config = ConfigDict(extra="forbid")

    site: Name | None = Field(None, description="Pilots at this site.")
    since: Time | None = Field(
        None, description="Pilots first seen at or after this time (ISO 8601; without an offset, UTC)."
    )
    reference: Name | None = Field(None, description="The pilot of this reference, as it is sent.")
    limit: int = Field(100, ge=1, le=1000)
    cursor: str | None = Field(None, max_length=MAX_CURSOR, description="The `next_cursor` of the page before.")


def _own_only(caller: Principal) -> str | None:
    """The requester whose pilots the caller sees: a pilot its own, admins and operators every one."""
    return None if caller.privileged else caller.sub


def _utc(moment: datetime | None, key: str) -> datetime | None:
    if moment is None:
        return None
    try:
        return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    except OverflowError:  # year 1 east of Greenwich, year 9999 west of it
        raise InvalidInput(
            f"{key} is outside the times this service can compare",
            [{"loc": ["query", key], "msg": "time out of range", "type": "value_error"}],
        ) from None


@router.get("", response_model=PilotPage, summary="Pilots on record, newest first")
async def list_pilots(caller: PilotsAndOperators, conn: Connection, query: Annotated[PilotQuery, Query()]) -> dict:
    """Newest first by first seen. A pilot sees only the pilots of its own token's subject."""
    where = PilotFilter(
        site=query.site, since=_utc(query.since, "since"), reference=query.reference, requester=_own_only(caller)
    )
    after = decode_cursor(query.cursor) if query.cursor else None
    page, next_after = await pilot_service.list_pilots(conn, where, after, query.limit)
    return {"pilots": page, "next_cursor": encode_cursor(next_after) if next_after else None}


# `:path`: references are often URLs (https://ce.example.org:9619/123.0), sent percent-encoded;
# the path the application sees is decoded, slashes included
@router.get("/{reference:path}", response_model=Pilot, summary="One pilot and the jobs it took")
async def get_pilot(
    reference: Annotated[
        Name,
        Path(
            description="The pilot's reference, percent-encoded (`https%3A%2F%2Fce.example.org%3A9619%2F123.0`).",
        ),
    ],
    caller: PilotsAndOperators,
    conn: Connection,
) -> Pilot:
    """A pilot may read only its own pilots: another's answers 404, as one not on record."""
    return await pilot_service.get_pilot(conn, reference, _own_only(caller))
