"""The schema: DIRAC's TaskQueueDB layout plus the job lifecycle.

A task queue (TQ) groups the waiting jobs whose requirements are identical.
Its keys are columns, each multi-valued requirement a list column (an array on
PostgreSQL): matching keeps a copy of the rows and tests them in memory.
`tq_jobs` holds exactly the jobs that are Waiting.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    bindparam,
    column,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.sql.elements import BindParameter, ColumnElement

from fairmatch.jobs.lifecycle import FINAL, HOLDING_A_SLOT, JobStatus
from fairmatch.taskqueues.matching_fields import AMOUNT_FIELDS
from fairmatch.taskqueues.requirements import MULTI_VALUE_FIELDS

# SQLite only auto-increments an INTEGER PRIMARY KEY (the rowid alias).
Id = BigInteger().with_variant(Integer(), "sqlite")

NAME = 255  # owners, groups, sites, platforms, tags, ...

ValueList = JSON().with_variant(ARRAY(String(NAME)), "postgresql")

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(column_0_label)s",
        "uq": "uq_%(table_name)s_%(column_0_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

task_queues = Table(
    "task_queues",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("requirements_hash", String(64), nullable=False, unique=True),
    Column("owner", String(NAME), nullable=False),
    Column("owner_group", String(NAME), nullable=False),
    Column("vo", String(NAME), nullable=False),
    Column("cpu_time", BigInteger, nullable=False),
    Column("priority_class", Integer, nullable=False),
    Column("job_class", String(NAME)),
    # the account the queue's jobs are charged to (their owner group unless they name
    # another): its association gives the queue its fair-share factor
    Column("account", String(NAME), nullable=False),
    # the amounts the queue's jobs ask for (fairmatch/taskqueues/matching_fields.py), 0: none;
    # e.g. the memory range in MB: a resource's MaxRAM must reach min_ram_mb, and the pilot
    # holds the payload to max_ram_mb
    *(Column(name, Integer, nullable=False, server_default="0") for name in AMOUNT_FIELDS),
    Column("priority", Float, nullable=False),
    # how the priority was made: policy, entity, share, weights, corrections
    Column("priority_origin", JSON),
    # the rank policy's lower band: a group without a share, whose queues matching draws
    # only when no share-holder's queue of the class is eligible for the pilot
    Column("shareless", Boolean, nullable=False, server_default="0"),
    Column("created_at", DateTime(timezone=True), nullable=False),
    # The value lists (sites, banned sites, ...), sorted: arrays on PostgreSQL, JSON lists
    # on SQLite; written once with the TQ, read by matching's copy and by the listing.
    *(Column(field, ValueList) for field in MULTI_VALUE_FIELDS),
    # Waiting jobs per user-priority level, [[real_priority, jobs], ...]: exact after each
    # priority-loop run, plus the jobs submitted since (claims are not subtracted, so
    # matching never waits on a counter row). Weights of the level lottery.
    Column("levels", JSON, nullable=False, default=list),
    # When priority, levels or membership last changed (the database's clock on
    # PostgreSQL): each matcher process polls it to keep its copy of this table.
    Column("changed_at", DateTime(timezone=True), nullable=False, index=True),
    sqlite_autoincrement=True,  # SQLite: an id is never given twice
)


def status_in(statuses: Iterable[JobStatus]) -> ColumnElement[bool]:
    """`status IN (...)` with the statuses written into the statement, not bound: an index
    predicate, and the same condition in a query, which the planner then sees implies it
    whatever the plan."""
    values = sorted(s.value for s in statuses)
    return column("status").in_(written_out("_".join(["status", *values]).lower(), values))


def written_out(name: str, values: list[str]) -> BindParameter[Any]:
    """A list of fixed values (never input) rendered into the statement when it runs."""
    return bindparam(name, values, expanding=True, literal_execute=True)


_MATCHED = status_in({JobStatus.Matched})
_HOLDING_A_SLOT = status_in(HOLDING_A_SLOT)
_WITH_PILOT = column("pilot_reference").isnot(None)
_FINISHED = column("finished_at").isnot(None)
_EXTERNAL = column("external_id").isnot(None)
# the job holding its external id: one that has not finished (a finished one gives it up)
_HOLDING_EXTERNAL_ID = _EXTERNAL & status_in(set(JobStatus) - FINAL)

# What a job's state changes write: a few dozen bytes. A claim or a status report
# rewrites the row, so what is written once (the requirements and the payload)
# lives apart, in job_specs. A heartbeat changes no indexed column: with room
# left in each page (fillfactor) its new row version stays in the page and no
# index is written (a HOT update).
jobs = Table(
    "jobs",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("status", String(16), nullable=False),
    Column("minor_status", String(NAME)),
    Column("owner", String(NAME), nullable=False),
    Column("owner_group", String(NAME), nullable=False),
    Column("vo", String(NAME), nullable=False),
    # the Slurm account usage is charged to (default: the owner group)
    Column("account", String(NAME), nullable=False),
    Column("cpu_time", BigInteger, nullable=False),
    Column("user_priority", Integer, nullable=False),
    # the job's class now: a change of class moves the job, its spec keeps the submitted one
    Column("priority_class", Integer, nullable=False),
    Column("job_class", String(NAME)),
    # The TQ the job was last queued in; informational once it leaves the queue.
    Column("task_queue_id", BigInteger),
    Column("submitted_at", DateTime(timezone=True), nullable=False),
    Column("matched_at", DateTime(timezone=True)),
    Column("lease_expires_at", DateTime(timezone=True)),
    Column("started_at", DateTime(timezone=True)),
    Column("heartbeat_at", DateTime(timezone=True)),
    Column("finished_at", DateTime(timezone=True)),
    Column("pilot_reference", String(NAME)),
    # the computing element the job was matched through (limits per CE count it)
    Column("grid_ce", String(NAME)),
    # the authenticated pilot that claimed it: only that pilot may report its status
    Column("matched_by", String(NAME)),
    Column("site", String(NAME)),
    Column("cpu_seconds", Float),
    Column("wall_seconds", Float),
    # returns to Waiting the owner did not ask for (a lease that ran out, a stalled job)
    Column("reschedules", Integer, nullable=False, server_default="0"),
    # the submitter's own id for the job (DIRAC's JobID): held by one unfinished job at a
    # time, free again once it finishes or is handed off
    Column("external_id", String(NAME)),
    # listings by status, the stalled-job watchdog, counts per status
    Index("ix_jobs_status_id", "status", "id"),
    Index("ix_jobs_owner_id", "owner", "id"),
    Index("ix_jobs_owner_group_id", "owner_group", "id"),
    # Partial indexes: a row version is entered only while the job is in the statuses
    # the query looks at, so most state changes write neither.
    # the lease sweep looks for Matched jobs whose lease ran out
    Index("ix_jobs_matched_lease", "lease_expires_at", postgresql_where=_MATCHED, sqlite_where=_MATCHED),
    # site limits count the jobs holding a slot at one site, or at one CE of it
    Index("ix_jobs_holding_site", "site", "grid_ce", postgresql_where=_HOLDING_A_SLOT, sqlite_where=_HOLDING_A_SLOT),
    # the jobs a pilot took
    Index("ix_jobs_pilot_reference", "pilot_reference", postgresql_where=_WITH_PILOT, sqlite_where=_WITH_PILOT),
    # the purge: finished jobs of one status, oldest first; only final jobs have finished_at
    Index("ix_jobs_finished", "status", "finished_at", postgresql_where=_FINISHED, sqlite_where=_FINISHED),
    # the jobs known by an external id, newest last; jobs without one are never entered
    Index("ix_jobs_external_id", "external_id", "id", postgresql_where=_EXTERNAL, sqlite_where=_EXTERNAL),
    Index(
        "uq_jobs_external_id_holder",
        "external_id",
        unique=True,
        postgresql_where=_HOLDING_EXTERNAL_ID,
        sqlite_where=_HOLDING_EXTERNAL_ID,
    ),
    postgresql_with={"fillfactor": 90},
    sqlite_autoincrement=True,  # SQLite: an id is never given twice
)


def _keyed_by_job() -> Column[int]:
    """The key of a table with one row per job, deleted with the job."""
    return Column("job_id", Id, ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True, autoincrement=False)


# What a job was submitted with, written once and never updated: the normalised
# requirements (enough to find the job's TQ again on reschedule, with the job's
# current priority class) and the payload handed to its pilot.
job_specs = Table(
    "job_specs",
    metadata,
    _keyed_by_job(),
    Column("requirements", JSON, nullable=False),
    Column("payload", JSON),
)

# The waiting jobs. The index serves both the user-priority level draw
# (GROUP BY real_priority) and "lowest job ids at that level".
tq_jobs = Table(
    "tq_jobs",
    metadata,
    _keyed_by_job(),
    # No cascade: a TQ is only deleted once empty, and the foreign key makes
    # a racing delete fail instead of silently dropping a waiting job.
    Column("tq_id", Id, ForeignKey("task_queues.id"), nullable=False),
    Column("user_priority", Integer, nullable=False),
    Column("real_priority", Float, nullable=False),
    Index("ix_tq_jobs_tq_level_job", "tq_id", "real_priority", "job_id"),
)

job_events = Table(
    "job_events",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("job_id", Id, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("status", String(16), nullable=False),
    Column("minor_status", String(NAME)),
    Column("at", DateTime(timezone=True), nullable=False),
    Column("source", String(64), nullable=False),
    # who acted: the caller's identity (its token's subject), or `system` for the service's
    # own loops; None for the events recorded before it was kept
    Column("by", String(NAME)),
    Index("ix_job_events_job_id", "job_id", "id"),
    # recent matches (the status screen's match rate)
    Index("ix_job_events_status_at", "status", "at"),
    sqlite_autoincrement=True,  # SQLite: an id is never given twice
)

# Idempotent matching: a pilot that retries with the same request_id gets the
# job its first attempt claimed. Keys are per requester (the token's subject),
# so one caller's request ids never reach another's jobs.
match_requests = Table(
    "match_requests",
    metadata,
    Column("requester", String(NAME), primary_key=True),
    Column("request_id", String(NAME), primary_key=True),
    Column("job_id", Id, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    # the purge: request ids past their replay time
    Column("created_at", DateTime(timezone=True), nullable=False, index=True),
    # the first request's matching fields: a replay must repeat them (None: recorded before they were kept)
    Column("resource", JSON),
)

groups = Table(
    "groups",
    metadata,
    Column("name", String(NAME), primary_key=True),
    Column("job_share", Float, nullable=False),
    # DIRAC's JOB_SHARING property: the group's jobs are matched by group alone.
    Column("job_sharing", Boolean, nullable=False),
    Column("properties", JSON, nullable=False),
    Column("allow_background_tqs", Boolean, nullable=False),
    Column("priority", Integer, nullable=False),
    Column("description", Text),
)

# Running-job history for the share corrections: one row per sampling instant,
# and the number of Matched+Running jobs per group (owner '') and per
# (group, owner) at that instant. Instants with nothing running still count.
history_samples = Table(
    "history_samples",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("sampled_at", DateTime(timezone=True), nullable=False, index=True),
    sqlite_autoincrement=True,  # SQLite: an id is never given twice
)

running_samples = Table(
    "running_samples",
    metadata,
    Column("sample_id", Id, ForeignKey("history_samples.id", ondelete="CASCADE"), primary_key=True),
    Column("owner_group", String(NAME), primary_key=True),
    Column("owner", String(NAME), primary_key=True),
    Column("running", Integer, nullable=False),
)

# Jobs running under another system's watch (DIRAC's JobDB follows the jobs fairmatch hands
# off), as that system last reported them per (group, owner): each sample adds the counts of
# the reports still fresh to the jobs fairmatch sees run itself.
reported_running = Table(
    "reported_running",
    metadata,
    Column("source", String(64), primary_key=True),
    Column("owner_group", String(NAME), primary_key=True),
    Column("owner", String(NAME), primary_key=True),
    Column("running", Integer, nullable=False),
    Column("reported_at", DateTime(timezone=True), nullable=False),
)

# One row per priority-loop run: who ran it, when, and what it decided
# (entities, shares, corrections) - the source of GET /shares.
priority_runs = Table(
    "priority_runs",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("runner", String(NAME), nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True), nullable=False, index=True),
    Column("policy", String(32), nullable=False),
    Column("task_queues", Integer, nullable=False),
    Column("report", JSON, nullable=False),
    sqlite_autoincrement=True,  # SQLite: an id is never given twice
)

# One row per purge run (the retention settings): who ran it, when, what it deleted and
# archived, and why it stopped early (error) - the source of GET /status's last_purge. A
# run's row is written when it starts (finished_at NULL while it runs): the other replicas
# see it and skip their turn.
purge_runs = Table(
    "purge_runs",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("runner", String(NAME), nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True)),
    Column("jobs", JSON, nullable=False),  # {status: jobs deleted}
    Column("events", Integer, nullable=False),
    Column("request_ids", Integer, nullable=False),
    Column("pilots", Integer, nullable=False),
    Column("archived", Integer, nullable=False),
    # the events of jobs finished before this were deleted: where the next run's events purge starts
    Column("events_before", DateTime(timezone=True)),
    Column("error", Text),
    # [{index, bytes_before, bytes_after}]: the indexes the run rebuilt (NULL: a run before they were)
    Column("indexes_rebuilt", JSON),
    sqlite_autoincrement=True,  # SQLite: an id is never given twice
)

# Grid Engine job classes: a job naming one gets its default priority class and
# may not exceed its maximum (unless privileged); the access lists say who may use it.
job_classes = Table(
    "job_classes",
    metadata,
    Column("name", String(NAME), primary_key=True),
    Column("default_class", Integer, nullable=False),
    Column("max_class", Integer, nullable=False),
    Column("allowed_users", JSON, nullable=False),  # [] = everybody
    Column("allowed_groups", JSON, nullable=False),  # [] = every group
    Column("priority", Integer, nullable=False),  # the multifactor "queue" factor
    Column("description", Text),
)

# The Slurm association tree as imported from sacctmgr, in its original order
# so that export gives the same text back. An account row has user ''.
associations = Table(
    "associations",
    metadata,
    Column("position", Integer, primary_key=True, autoincrement=False),
    Column("account", String(NAME), nullable=False),
    Column("user", String(NAME), nullable=False),
    Column("parent", String(NAME), nullable=False),
    Column("shares", String(64), nullable=False),  # as written: a number or "parent"
    UniqueConstraint("account", "user", name="uq_associations_account_user"),
)

# Decayed usage per association node (user '' for an account), decayed lazily:
# usage * 2^(-elapsed/half_life) from updated_at, so a changed half-life keeps it.
usage_totals = Table(
    "usage_totals",
    metadata,
    Column("account", String(NAME), primary_key=True),
    Column("user", String(NAME), primary_key=True),
    Column("usage", Float, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("period_start", DateTime(timezone=True), nullable=False),
)

# Every charge: appended by the report that finishes a job, folded into usage_totals
# later (folded_at set in the same transaction), read for windowed usage (the rank policy).
usage_charges = Table(
    "usage_charges",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("charged_at", DateTime(timezone=True), nullable=False, index=True),
    Column("job_id", BigInteger, nullable=False),
    Column("vo", String(NAME), nullable=False),
    Column("owner_group", String(NAME), nullable=False),
    Column("owner", String(NAME), nullable=False),
    Column("account", String(NAME), nullable=False),
    Column("charge", Float, nullable=False),
    Column("folded_at", DateTime(timezone=True)),  # NULL until added to usage_totals
    # the fold reads only what waits: an index as small as one interval's charges
    Index(
        "ix_usage_charges_pending",
        "id",
        postgresql_where=text("folded_at IS NULL"),
        sqlite_where=text("folded_at IS NULL"),
    ),
    sqlite_autoincrement=True,  # SQLite: an id is never given twice
)

# Site limits (DIRAC Limiter): one row per site × CE × attribute × value; grid_ce ''
# for a limit on the whole site (DIRAC's RunningLimit/<site>), else one CE's
# (RunningLimit/<site>/CEs/<CE>).
site_limits = Table(
    "site_limits",
    metadata,
    Column("site", String(NAME), primary_key=True),
    Column("grid_ce", String(NAME), primary_key=True, server_default=""),
    Column("attribute", String(16), primary_key=True),  # job_type, owner_group, owner
    Column("value", String(NAME), primary_key=True),
    Column("running_limit", Integer),  # at most this many Matched + Running
    Column("matching_delay", Float),  # at least this many seconds between two matches
)

# When a limited value was last matched at a site; kept apart from the limits
# so that replacing the limits does not forget a running delay.
site_limit_matches = Table(
    "site_limit_matches",
    metadata,
    Column("site", String(NAME), primary_key=True),
    Column("grid_ce", String(NAME), primary_key=True, server_default=""),
    Column("attribute", String(16), primary_key=True),
    Column("value", String(NAME), primary_key=True),
    Column("last_match_at", DateTime(timezone=True), nullable=False),
)

# The site mask (DIRAC's banned sites): a pilot at a site listed here is matched
# only the jobs meant to test a site (matching.masked_site_job_types).
site_mask = Table(
    "site_mask",
    metadata,
    Column("site", String(NAME), primary_key=True),
    Column("reason", Text, nullable=False),
    Column("banned_at", DateTime(timezone=True), nullable=False),
    Column("banned_by", String(NAME), nullable=False),
)

# What operators changed, and who (the audit log): groups, job classes, site limits,
# the site mask, associations and usage, priorities, bulk actions. Appended only.
audit_log = Table(
    "audit_log",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("at", DateTime(timezone=True), nullable=False, index=True),
    Column("actor", String(NAME), nullable=False),  # the caller's token subject
    Column("action", String(64), nullable=False),  # e.g. group.put, usage.reset
    Column("target", String(NAME)),  # what was changed: a group's name, a site, a job id
    Column("detail", JSON),  # what was asked for, and what it did
    sqlite_autoincrement=True,
)

# Every pilot that asked for a job by its reference (DIRAC's PilotAgentsDB): where
# it runs, what it took and how often it was sent away empty. `requester` is the
# identity it authenticated as, whose pilots it may read.
pilots = Table(
    "pilots",
    metadata,
    Column("reference", String(NAME), primary_key=True),
    Column("requester", String(NAME), nullable=False),
    Column("site", String(NAME), nullable=False),
    Column("grid_ce", String(NAME)),
    Column("benchmark", Float),
    Column("first_seen", DateTime(timezone=True), nullable=False),
    Column("last_seen", DateTime(timezone=True), nullable=False),
    Column("matches", Integer, nullable=False, server_default="0"),
    Column("empty_matches", Integer, nullable=False, server_default="0"),
    Column("current_job_id", Id),
    # the listing: newest first, paginated
    Index("ix_pilots_first_seen", "first_seen", "reference"),
)

# Written by the service's background work on its own schedule (purge_runs also by an
# admin's one-off purge), never by a request a pilot or a user makes.
BACKGROUND_TABLES = frozenset({history_samples.name, running_samples.name, priority_runs.name, purge_runs.name})
