"""/status: one overview for operators (what `fairmatch status` shows)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from fairmatch.api.deps import Connection, Operators
from fairmatch.services import status as status_service

router = APIRouter(tags=["status"])


class JobCounts(BaseModel):
    waiting: int
    held: int = Field(description="Held: out of their task queues until released.")
    matched: int
    running: int
    stalled: int


class GroupCounts(BaseModel):
    owner_group: str
    waiting: int
    held: int
    matched: int
    running: int
    stalled: int


class MatchRate(BaseModel):
    window_seconds: int = Field(description="The window, ending at generated_at.")
    matches: int = Field(description="Jobs matched in the window (by any replica).")
    per_second: float


class BusyTaskQueue(BaseModel):
    task_queue_id: int
    owner: str
    owner_group: str
    priority_class: int
    priority: float
    jobs: int = Field(description="Waiting jobs.")


class LastPriorityRun(BaseModel):
    runner: str
    policy: str
    started_at: datetime
    finished_at: datetime
    task_queues: int


class RebuiltIndex(BaseModel):
    index: str
    bytes_before: int = Field(description="Its size when the purge found it bloated.")
    bytes_after: int = Field(description="Its size rebuilt.")


class LastPurge(BaseModel):
    runner: str = Field(description="The process that ran it (host:pid), or the admin of a one-off purge.")
    started_at: datetime
    finished_at: datetime
    jobs: dict[str, int] = Field(description="Jobs deleted per final status.")
    events: int = Field(description="Events of finished jobs deleted before their jobs (retention.events_days).")
    request_ids: int = Field(description="Request ids deleted: they replay their match no more.")
    pilots: int = Field(description="Pilot records deleted.")
    archived: int = Field(description="Jobs written to the archive before they were deleted.")
    error: str | None = Field(description="Why the purge stopped early (an unwritable archive); null when it did not.")
    indexes_rebuilt: list[RebuiltIndex] = Field(
        default=[], description="Indexes rebuilt after the deletions (retention.index_rebuild_ratio)."
    )


class DatabaseWarning(BaseModel):
    setting: str = Field(description="The PostgreSQL setting, as `SHOW` names it.")
    value: str = Field(description="Its value for fairmatch's sessions.")
    cost: str = Field(description="What it costs fairmatch.")


class Status(BaseModel):
    generated_at: datetime
    totals: JobCounts = Field(description="Jobs in each non-final state.")
    groups: list[GroupCounts] = Field(description="Per group with non-final jobs, by name.")
    match_rate: list[MatchRate] = Field(description="The last minute and the last five minutes.")
    top_task_queues: list[BusyTaskQueue] = Field(description="Most waiting jobs first.")
    last_priority_run: LastPriorityRun | None = Field(description="null before the first run.")
    last_purge: LastPurge | None = Field(description="The latest purge run; null before the first.")
    database_warnings: list[DatabaseWarning] = Field(
        description="PostgreSQL settings that break what fairmatch promises (autovacuum, fsync or "
        "synchronous_commit off); empty when there are none, and on SQLite."
    )


@router.get("/status", response_model=Status, summary="Jobs per group, match rate, busiest queues (operator)")
async def status(
    caller: Operators,
    conn: Connection,
    top: Annotated[int, Query(ge=1, le=100, description="How many task queues to list.")] = 10,
) -> dict:
    return await status_service.summary(conn, top)
