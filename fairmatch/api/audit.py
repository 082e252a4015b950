"""/audit: what operators changed, when and who (admin)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field, field_validator

from fairmatch.api.deps import Admin, Connection
from fairmatch.fields import Moment, Name
from fairmatch.services import audit

router = APIRouter(prefix="/audit", tags=["audit"])

MAX_ID = 2**63 - 1


class AuditQuery(BaseModel):
    """A page of the log; a parameter it does not name is a 422."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    since: Moment | None = Field(None, description="Only entries at or after this time (ISO 8601).")
    actor: Name | None = Field(None, description="Only this caller's changes (a token subject).")
    action: str | None = Field(None, max_length=64, description="Only this action, e.g. `group.put`.")
    limit: int = Field(100, ge=1, le=1000, description="At most this many entries in the page.")
    after: int | None = Field(
        None, ge=1, le=MAX_ID, description="Continue after the page that gave this `next_cursor` (older entries)."
    )

    @field_validator("since")
    @classmethod
    def _in_utc(cls, moment: datetime | None) -> datetime | None:
        """The times are stored in UTC (SQLite compares them as text)."""
        return None if moment is None else moment.astimezone(UTC)


class AuditEntry(BaseModel):
    id: int
    at: datetime
    actor: str = Field(description="Who made the change: the caller's token subject.")
    action: str = Field(description="What kind of change: see the audit how-to for the list.")
    target: str | None = Field(description="What was changed: a group, a job class, a site, a job id; null for all.")
    detail: dict[str, Any] | None = Field(description="What was asked for, and what the change did.")


class AuditLog(BaseModel):
    entries: list[AuditEntry] = Field(description="Newest first.")
    next_cursor: int | None = Field(description="Pass as `after` for the next (older) page; null at the end.")


@router.get("", response_model=AuditLog, summary="The audit log, newest first (admin)")
async def read_audit(caller: Admin, conn: Connection, query: Annotated[AuditQuery, Query()]) -> dict:
    page, next_before = await audit.entries(
        conn, since=query.since, actor=query.actor, action=query.action, before_id=query.after, limit=query.limit
    )
    return {"entries": page, "next_cursor": next_before}
