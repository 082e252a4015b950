"""The job state machine (pure logic).

Waiting -> Matched -> Running -> Done | Failed
Matched -> Waiting          (lease expired, or rescheduled)
Running -> Stalled -> Waiting | Failed
any non-final state -> Killed
Running -> Running is the heartbeat. Everything else is refused.
"""

from __future__ import annotations

from enum import StrEnum


class JobStatus(StrEnum):
    Waiting = "Waiting"
    Matched = "Matched"
    Running = "Running"
    Stalled = "Stalled"
    Done = "Done"
    Failed = "Failed"
    Killed = "Killed"


FINAL = frozenset({JobStatus.Done, JobStatus.Failed, JobStatus.Killed})
# the jobs that occupy a slot at their site (what site running limits count)
HOLDING_A_SLOT = frozenset({JobStatus.Matched, JobStatus.Running})

_ALLOWED: dict[JobStatus, frozenset[JobStatus]] = {
    JobStatus.Waiting: frozenset({JobStatus.Matched, JobStatus.Killed}),
    JobStatus.Matched: frozenset({JobStatus.Running, JobStatus.Waiting, JobStatus.Killed}),
    JobStatus.Running: frozenset(
        {JobStatus.Running, JobStatus.Done, JobStatus.Failed, JobStatus.Stalled, JobStatus.Killed}
    ),
    JobStatus.Stalled: frozenset({JobStatus.Waiting, JobStatus.Failed, JobStatus.Killed}),
}


def allowed(current: JobStatus, new: JobStatus) -> bool:
    return new in _ALLOWED.get(current, frozenset())

