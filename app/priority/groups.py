"""Groups: configured in TOML, persisted in the database, edited over the API.

The `job_sharing` column is what matching reads; it is derived here, from
"JOB_SHARING" in the properties, on every write, so the two never disagree.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, Strict
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from app.db.dialect import insert_ignoring_conflicts
from app.db.engine import read_transaction
from app.db.tables import groups
from app.errors import NotFound
from app.fields import Int, Name
from app.settings import GroupSettings
from app.taskqueues import changes

# The only property with an effect; others (DIRAC's NormalUser, ...) are kept as given.
JOB_SHARING = "JOB_SHARING"

DEFAULT_JOB_SHARE = 1000.0
MAX_JOB_SHARE = 1e12
MAX_PROPERTIES = 100
PRIORITY_MIN, PRIORITY_MAX = -1000, 1000
MAX_DESCRIPTION = 1000

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _plain_text(value: str) -> str:
    # one line of text: newlines and other control characters would garble listings
    if _CONTROL.search(value):
        raise ValueError("control characters are not allowed")
    return value


Description = Annotated[str, Field(max_length=MAX_DESCRIPTION), AfterValidator(_plain_text)]


class GroupUpdate(BaseModel):
    """A group's full definition (PUT replaces it; an omitted field takes its default).

    `properties` may name anything (DIRAC groups carry NormalUser, GenericPilot, ...):
    names are kept, de-duplicated and sorted, but only JOB_SHARING has an effect —
    the group's jobs are then matched by group alone, whoever the pilot's Owner is.
    """

    model_config = ConfigDict(extra="forbid")

    job_share: Annotated[float, Strict()] = Field(
        DEFAULT_JOB_SHARE, ge=0, le=MAX_JOB_SHARE, allow_inf_nan=False,
        description="The group's share (DIRAC JobShare).",
    )  # fmt: skip
    properties: list[Name] = Field(
        default_factory=list, max_length=MAX_PROPERTIES, description='e.g. ["JOB_SHARING"].'
    )
    allow_background_tqs: Annotated[bool, Strict()] = Field(
        False,
        description="A queue of background jobs (average real priority <= 0.1) gets the minimum priority.",
    )
    priority: Int = Field(0, ge=PRIORITY_MIN, le=PRIORITY_MAX, description="The group's priority level.")
    description: Description | None = None


def _row(
    job_share: float,
    properties: Iterable[str],
    allow_background_tqs: bool,
    priority: int,
    description: str | None = None,
) -> dict[str, Any]:
    """A groups row; the one place job_sharing is derived from the properties."""
    properties = sorted(set(properties))
    return {
        "job_share": job_share,
        "job_sharing": JOB_SHARING in properties,
        "properties": properties,
        "allow_background_tqs": allow_background_tqs,
        "priority": priority,
        "description": description,
    }


def _as_dict(row: Any) -> dict[str, Any]:
    return {
        "name": row.name,
        "job_share": row.job_share,
        "properties": sorted(row.properties),
        "job_sharing": row.job_sharing,
        "allow_background_tqs": row.allow_background_tqs,
        "priority": row.priority,
        "description": row.description,
    }


async def create_missing(conn: AsyncConnection, configured: dict[str, GroupSettings]) -> None:
    """Insert configured groups the database does not know yet; existing ones keep their values,
    so edits made over the API survive restarts."""
    if not configured:
        return
    rows = [
        {"name": name, **_row(g.job_share, g.properties, g.allow_background_tqs, g.priority)}
        for name, g in sorted(configured.items())
    ]
    async with conn.begin():
        await conn.execute(insert_ignoring_conflicts(conn, groups, "name"), rows)


async def list_groups(conn: AsyncConnection, visible: frozenset[str] | None = None) -> list[dict[str, Any]]:
    """All groups by name; `visible` (when not None) restricts them to those names."""
    query = select(groups).order_by(groups.c.name)
    if visible is not None:
        query = query.where(groups.c.name.in_(sorted(visible)))
    async with read_transaction(conn):
        rows = (await conn.execute(query)).all()
    return [_as_dict(row) for row in rows]


async def get_group(
    conn: AsyncConnection, name: str, visible: frozenset[str] | None = None
) -> dict[str, Any]:
    """One group; a group outside `visible` is as missing as one that does not exist."""
    if visible is not None and name not in visible:
        raise NotFound(f"group {name!r} does not exist")
    async with read_transaction(conn):
        row = (await conn.execute(select(groups).where(groups.c.name == name))).first()
    if row is None:
        raise NotFound(f"group {name!r} does not exist")
    return _as_dict(row)


async def sharing_groups(conn: AsyncConnection) -> frozenset[str]:
    """Groups with JOB_SHARING (matched by group alone). Inside the caller's transaction."""
    return frozenset((await conn.execute(select(groups.c.name).where(groups.c.job_sharing.is_(True)))).scalars())


async def put_group(conn: AsyncConnection, name: str, spec: GroupUpdate) -> tuple[dict[str, Any], bool]:
    """Create or replace a group in one transaction; returns (the stored group, created?).

    Insert-or-nothing first, then update: on PostgreSQL a concurrent creator
    makes the insert wait and do nothing, so two PUTs of a new group never
    collide; on SQLite BEGIN IMMEDIATE serialises them.
    """
    values = _row(spec.job_share, spec.properties, spec.allow_background_tqs, spec.priority, spec.description)
    insert = insert_ignoring_conflicts(conn, groups, "name").values(name=name, **values)
    async with conn.begin():
        created = (await conn.execute(insert.returning(groups.c.name))).first() is not None
        if not created:
            await conn.execute(update(groups).where(groups.c.name == name).values(**values))
        row = (await conn.execute(select(groups).where(groups.c.name == name))).one()
    changes.bump()
    return _as_dict(row), created
