"""/status: one overview for operators (what `fairmatch status` shows)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from fairmatch.api.deps import Connection, CurrentSettings, Operators
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


class ShareDrift(BaseModel):
    setting: str = Field(description="The setting that explains the drift, as the configuration names it.")
    value: str = Field(description="Its value now.")
    group: str = Field(description="The group that got more than its share.")
    achieved_share: float = Field(description="Its fraction of the running jobs over the samples, 0..1.")
    target_share: float = Field(description="Its configured share over those of the groups that ran or wait, 0..1.")
    samples: int = Field(description="The running-job samples it was measured over (the latest, with jobs running).")
    cpu_time: int = Field(description="The longest CPU bucket of the group's waiting jobs, in seconds.")
    behind: list[str] = Field(description="Groups below their targets whose waiting jobs are all in shorter buckets.")
    message: str = Field(description="All of it in one sentence, as the console's overview warns.")


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
    share_drift: list[ShareDrift] = Field(
        description="Groups whose achieved share over the latest running-job samples is at least 20 points "
        "above their target because of a matching setting (`matching.prefer_longest_cpu = true` with their "
        "backlog in the longest CPU bucket); empty when there is none."
    )


@router.get("/status", response_model=Status, summary="Jobs per group, match rate, busiest queues (operator)")
async def status(
    caller: Operators,
    conn: Connection,
    settings: CurrentSettings,
    top: Annotated[int, Query(ge=1, le=100, description="How many task queues to list.")] = 10,
) -> dict:
    return await status_service.summary(conn, top, settings.effective_matching)
