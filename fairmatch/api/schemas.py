"""What the API answers (the OpenAPI schema is generated from these). The shapes the data
layer reads (a job, a task queue, a pilot) are declared in their own areas and named here."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, create_model

from fairmatch.jobs.views import Job
from fairmatch.matching.eligibility import CONDITION_NAMES
from fairmatch.matching.pilots import Pilot as Pilot
from fairmatch.matching.pilots import PilotSummary
from fairmatch.taskqueues.views import TaskQueue


class SubmittedJob(BaseModel):
    job_id: int
    task_queue_id: int
    status: str
    external_id: str | None = Field(description="The submitter's own id for the job, when it gave one.")


class SubmitResponse(BaseModel):
    jobs: list[SubmittedJob]


class PurgeResult(BaseModel):
    dry_run: bool
    finished_before: datetime = Field(description="The jobs purged (or counted) finished before this.")
    jobs: dict[str, int] = Field(description="Jobs deleted (a dry run: that would be) per final status.")
    archived: int = Field(description="Jobs written to the archive (retention.archive_dir) before deletion.")


class PilotPage(BaseModel):
    pilots: list[PilotSummary]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null at the end.")


class JobEvent(BaseModel):
    at: datetime
    status: str = Field(description="The status the job took (a priority change records the status it kept).")
    minor_status: str | None
    source: str = Field(
        description="What made the change: submit, match, api (a status report), reschedule, kill, priority,"
        " hold, release, lease (a pilot that never confirmed), stall (the stalled-job watchdog), withdraw (by"
        " its external id), replace (a new job took its external id)."
    )
    by: str | None = Field(
        description="Who acted: the caller's identity (its token's subject), `system` for the service's own"
        " watchdogs; null for events recorded before it was kept."
    )


class JobHistory(BaseModel):
    job_id: int
    events: list[JobEvent] = Field(description="Oldest first.")


class JobPage(BaseModel):
    jobs: list[Job]
    next_cursor: str | None = Field(description="Pass as `after` for the next page; null at the end.")


class TaskQueueList(BaseModel):
    task_queues: list[TaskQueue]


class LimitReason(BaseModel):
    """A site limit that keeps a task queue from this resource now."""

    rule: Literal["running_limit", "matching_delay"]
    site: str
    grid_ce: str = Field("", description="The CE the limit is on ('' for the whole site).")
    attribute: Literal["job_type", "owner_group", "owner"]
    value: str
    limit: int | None = Field(None, description="running_limit: the most jobs Matched + Running.")
    running: int | None = Field(None, description="running_limit: jobs Matched + Running now.")
    delay_seconds: float | None = Field(None, description="matching_delay: seconds between two matches.")
    next_match_at: datetime | None = Field(None, description="matching_delay: when the next match may be.")


class MatchingTaskQueue(TaskQueue):
    probability: float = Field(description="Chance that a match with this resource draws this TQ.")
    excluded_by: list[LimitReason] = Field(
        default_factory=list, description="Site limits that keep this TQ out now (then probability is 0)."
    )


_condition_counts: dict[str, Any] = {name: (int, ...) for name in CONDITION_NAMES}
RejectedBy = create_model(
    "RejectedBy",
    __doc__="Per condition, how many task queues with waiting jobs fail it (one failing several counts under each).",
    **_condition_counts,
)


class MatchAnalysis(BaseModel):
    """Why a resource gets what it gets, as HTCondor's `condor_q -better-analyze`."""

    task_queues_considered: int = Field(description="Task queues with waiting jobs.")
    eligible: int = Field(description="Those passing every condition.")
    rejected_by: RejectedBy


class MatchingTaskQueueList(BaseModel):
    task_queues: list[MatchingTaskQueue]
    analysis: MatchAnalysis


class Health(BaseModel):
    status: str


class EntityTaskQueue(BaseModel):
    task_queue_id: int
    priority: float


class EntityShare(BaseModel):
    group: str
    owner: str | None = Field(description="null: a JOB_SHARING group, one entity.")
    configured_share: float = Field(description="The group's job_share, divided among its owners when split.")
    group_correction: float
    user_correction: float
    share: float = Field(description="After corrections.")
    normalised_share: float
    task_queues: list[EntityTaskQueue]


class PriorityRun(BaseModel):
    runner: str
    started_at: datetime
    finished_at: datetime
    task_queues: int
    policy: str
    tq_weight: str
    corrections_enabled: bool
    entities: list[EntityShare] = Field(default_factory=list, description="dirac: the sharing entities.")
    task_queue_priorities: list[dict[str, Any]] = Field(
        description="Every TQ's priority and how it was made (the policy's terms or factors)."
    )
    window_days: float | None = Field(None, description="rank: the usage window.")
    associations: list[dict[str, Any]] | None = Field(
        None, description="multifactor: the association tree with shares, usage and fair-share factors."
    )
    corrections: dict[str, Any] = Field(
        description="Per corrector instance: per slice the shares, usage and corrections; the final factors."
    )


class RecomputeResult(PriorityRun):
    changed: int = Field(description="TQs whose priority or explanation changed.")


class QueuePriority(BaseModel):
    task_queue_id: int
    owner: str
    owner_group: str
    account: str = Field(description="The account the queue's jobs are charged to.")
    priority_class: int
    priority: float
    origin: dict[str, Any] | None = Field(description="The policy's terms or factors, weights and contributions.")


class JobPriority(BaseModel):
    job_id: int
    task_queue_id: int
    user_priority: int
    real_priority: float
    priority_class: int
    task_queue_priority: float


class Priorities(BaseModel):
    policy: str
    lottery: str
    task_queues: list[QueuePriority]
    jobs: list[JobPriority]


class AssociationUsage(BaseModel):
    """One row of `sshare -a`."""

    account: str
    user: str | None = Field(description="None for an account's own row.")
    parent: str | None = Field(description="A user's account, or the account above (None at the root).")
    shares: float | Literal["parent"]
    norm_shares: float
    raw_usage: float
    effective_usage: float | None
    fairshare: float | None


class AssociationUsageList(BaseModel):
    associations: list[AssociationUsage]
