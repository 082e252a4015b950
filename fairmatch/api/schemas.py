"""What the API answers (the OpenAPI schema is generated from these)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, JsonValue, create_model

from fairmatch.matching.eligibility import CONDITION_NAMES


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


class Job(BaseModel):
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
    sites: list[str]
    banned_sites: list[str]
    grid_ces: list[str]
    platforms: list[str]
    job_types: list[str]
    tags: list[str]
    min_ram_mb: int = Field(description="The memory (MB) the job needs; 0: none.")
    max_ram_mb: int = Field(description="The most memory (MB) the job may use, which the pilot enforces; 0: no limit.")
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


class PilotSummary(BaseModel):
    """A pilot on record: one that asked for a job naming its `PilotReference`."""

    reference: str
    site: str = Field(description="Where it last asked for a job.")
    grid_ce: str | None = Field(description="The CE it runs behind, when it named exactly one.")
    benchmark: float | None = Field(description="The last `PilotBenchmark` it sent.")
    first_seen: datetime
    last_seen: datetime
    matches: int = Field(description="Jobs it took.")
    empty_matches: int = Field(description="Requests it got no job for (204), written within about a second.")
    current_job_id: int | None = Field(description="The job it took last.")


class Pilot(PilotSummary):
    job_ids: list[int] = Field(description="Every job it took, oldest first.")


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


class TaskQueue(BaseModel):
    task_queue_id: int
    owner: str
    owner_group: str
    account: str = Field(
        description="The account the queue's jobs are charged to (their owner group unless they name another): "
        "its association gives the queue its fair-share factor under `multifactor`."
    )
    vo: str
    cpu_time: int
    priority_class: int
    job_class: str | None
    priority: float
    priority_origin: dict[str, Any] | None = Field(
        description="How the priority was made: policy, entity, its share, corrections, the TQ's weight "
        "(dirac: also its own priority and its site variants, summed or not)."
    )
    jobs: int = Field(description="Waiting jobs.")
    sites: list[str]
    banned_sites: list[str]
    grid_ces: list[str]
    platforms: list[str]
    job_types: list[str]
    tags: list[str]
    min_ram_mb: int = Field(
        description="The memory (MB) the queue's jobs need: a resource's MaxRAM must reach it; 0: none."
    )
    max_ram_mb: int = Field(description="The most memory (MB) the queue's jobs may use; 0: no limit.")
    created_at: datetime


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
