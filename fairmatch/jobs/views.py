"""A job as the API shows it: read from the database once, answered by every route that shows a job."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field, JsonValue

from fairmatch.taskqueues.views import with_requirements


class _JobPlacement(BaseModel):
    job_id: int
    external_id: str | None = Field(description="The submitter's own id for the job (DIRAC's JobID), if given.")
    status: str
    minor_status: str | None = Field(
        description="Free text beside the status, as in DIRAC: `Assigned` once matched; then what the pilot's "
        "reports state, or none. Every change of status sets its own (none when it states none), so nothing "
        "a former status said stays; a heartbeat that states none keeps the one there is. The service's own "
        "changes state why: `Marked for termination` (killed), `Put on hold`, `Released from hold`, "
        "`matched lease expired`, `no heartbeat`, `Stalled too long`."
    )
    task_queue_id: int | None = Field(
        description="The TQ the job waits in (Waiting), or was matched from (match answers)."
    )
    owner: str
    owner_group: str
    vo: str
    account: str = Field(description="The Slurm account usage is charged to.")
    cpu_time: int = Field(description="CPU seconds requested.")
    cpu_bucket: int | None = Field(description="The CPU-time segment the job was queued under.")


if TYPE_CHECKING:
    _JobRequirements = _JobPlacement
else:
    _JobRequirements = with_requirements(_JobPlacement)


class Job(_JobRequirements):
    user_priority: int
    priority_class: int
    job_class: str | None
    payload: JsonValue
    site: str | None
    pilot_reference: str | None = Field(description="The pilot that took the job (its `PilotReference`).")
    grid_ce: str | None = Field(description="The CE the job was matched through, when the pilot named exactly one.")
    submitted_at: datetime
    matched_at: datetime | None
    lease_expires_at: datetime | None
    started_at: datetime | None
    heartbeat_at: datetime | None
    finished_at: datetime | None
    cpu_seconds: float | None
    wall_seconds: float | None
    reschedules: int = Field(
        description="Returns to Waiting the owner did not ask for (lease ran out, stalled, handed back by its pilot)."
    )
