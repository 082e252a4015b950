"""The job state machine (pure logic).

Waiting -> Matched -> Running -> Done | Failed
Waiting -> Held -> Waiting  (held and released by its owner or an operator)
Matched -> Waiting          (lease expired, or rescheduled)
Matched -> Failed           (its pilot could not start it)
Running -> Stalled -> Waiting | Failed
Stalled -> Running | Done | Failed   (its pilot reports again)
any non-final state -> Killed
Waiting -> HandedOff        (a match that hands the job to a system that follows it from then on)
Running -> Running is the heartbeat. Everything else is refused.

Beside its status a job has a minor status (DIRAC's): each change of status sets the
one the change states, or none, so that nothing a former status said outlives it
(a Done job is not still `Assigned`); only a heartbeat that states none keeps it.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from fairmatch.clock import as_utc
from fairmatch.jobs.settings import JobSettings


class JobStatus(StrEnum):
    Waiting = "Waiting"
    Held = "Held"  # out of its task queue until released: never matched, its id and priority kept
    Matched = "Matched"
    Running = "Running"
    Stalled = "Stalled"
    Done = "Done"
    Failed = "Failed"
    Killed = "Killed"
    # matched by a request that hands it off (DIRAC's JobDB follows it from then on): it
    # left the task queues for good, and no watchdog of fairmatch's ever puts it back
    HandedOff = "HandedOff"


FINAL = frozenset({JobStatus.Done, JobStatus.Failed, JobStatus.Killed, JobStatus.HandedOff})
# the jobs a reschedule puts back in their task queue: held by a pilot, or stalled
RESCHEDULABLE = frozenset({JobStatus.Matched, JobStatus.Stalled})
# the jobs that occupy a slot at their site (what site running limits count)
HOLDING_A_SLOT = frozenset({JobStatus.Matched, JobStatus.Running})

_ALLOWED: dict[JobStatus, frozenset[JobStatus]] = {
    JobStatus.Waiting: frozenset({JobStatus.Matched, JobStatus.HandedOff, JobStatus.Held, JobStatus.Killed}),
    JobStatus.Held: frozenset({JobStatus.Waiting, JobStatus.Killed}),
    # a pilot that cannot start its job fails it (DIRAC's pilots do, with a minor status)
    JobStatus.Matched: frozenset({JobStatus.Running, JobStatus.Waiting, JobStatus.Failed, JobStatus.Killed}),
    JobStatus.Running: frozenset(
        {JobStatus.Running, JobStatus.Done, JobStatus.Failed, JobStatus.Stalled, JobStatus.Killed}
    ),
    # a stalled job's pilot may report again, as DIRAC's stalled-job agent lets it
    JobStatus.Stalled: frozenset(
        {JobStatus.Running, JobStatus.Done, JobStatus.Waiting, JobStatus.Failed, JobStatus.Killed}
    ),
}


def allowed(current: JobStatus, new: JobStatus) -> bool:
    return new in _ALLOWED.get(current, frozenset())


def starts(current: JobStatus, new: JobStatus) -> bool:
    """Whether `current -> new` starts the job: its pilot confirms it. A pilot that fails
    a Matched job never started it; a stalled job reporting again had started before."""
    return current is JobStatus.Matched and new is JobStatus.Running


def ends_lease(current: JobStatus, new: JobStatus) -> bool:
    """Whether `current -> new` ends the job's lease: its pilot answered the match."""
    return current is JobStatus.Matched and new is not JobStatus.Matched


# the minor statuses of the changes the service makes itself (DIRAC's words where DIRAC has them)
ASSIGNED = "Assigned"  # matched, as DIRAC's Matcher records it
KILLED = "Marked for termination"  # killed, as DIRAC's job manager records it
HELD = "Put on hold"
RELEASED = "Released from hold"
NO_HEARTBEAT = "no heartbeat"  # Running -> Stalled by the watchdog


def keeps_minor_status(current: JobStatus, new: JobStatus, stated: str | None) -> bool:
    """Whether a report of `new` with minor status `stated` (None: none) leaves the minor status
    of a job in `current` as it is: only a heartbeat that states none. Any other report sets
    the one it states, or none."""
    return stated is None and current is new


def lease_lapsed(job: Any, by: datetime) -> bool:
    """Whether the job is Matched with a lease that ran out by `by`."""
    lease = as_utc(job.lease_expires_at)
    return job.status == JobStatus.Matched and lease is not None and lease <= by


def stalled_out(job: Any, now: datetime, jobs: JobSettings) -> bool:
    """Whether the job has been Stalled for `jobs.stalled_fail_seconds`: it was marked
    `stall_timeout_seconds` after its last report, and nothing came since."""
    silent = timedelta(seconds=jobs.stall_timeout_seconds + jobs.stalled_fail_seconds)
    last = as_utc(job.heartbeat_at)
    return job.status == JobStatus.Stalled and last is not None and last <= now - silent


# who acts for the service's own loops (leases, stalled jobs) in a job's history; any
# other actor is a caller's identity, its token's subject
SYSTEM = "system"
