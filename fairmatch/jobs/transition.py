"""What a pilot's status report does to its job, for every status the job may be in. Pure logic.

A report is taken under the job's row lock, and what it changes depends on the
status found there. `ReportTransition` states it for every status before at
once: each jobs column the report sets, with its value and the statuses before
in which it is set, whether the report is an event there, and what it charges.
A backend either applies it to the status it finds (`values`, `writes_event`,
`charge`) or renders it into one statement that looks the status up itself;
neither states a rule of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any

from fairmatch.accounting.settings import AccountingSettings
from fairmatch.accounting.usage import CHARGED_STATUSES, charge_for
from fairmatch.jobs.lifecycle import FINAL, JobStatus, allowed, ends_lease, keeps_minor_status, starts

# every jobs column a report may set, in a fixed order: a statement rendered from them is the
# same text for every report
REPORTED_COLUMNS = (
    "status",
    "minor_status",
    "heartbeat_at",
    "cpu_seconds",
    "wall_seconds",
    "started_at",
    "lease_expires_at",
    "finished_at",
)


@dataclass(frozen=True, slots=True)
class ColumnChange:
    """What a report makes of one jobs column: `value`, when the job was in one of `when`
    (otherwise the column keeps what it holds)."""

    value: Any
    when: frozenset[JobStatus]


@dataclass(frozen=True, slots=True)
class ReportTransition:
    """A report of `status`, made at `at`, to a job in whatever status it is."""

    status: JobStatus
    at: datetime
    taken_from: frozenset[JobStatus]  # the statuses the job may take the report in; in any other it is refused
    columns: Mapping[str, ColumnChange]  # each of REPORTED_COLUMNS
    event_from: frozenset[JobStatus]  # the statuses in which taking it is an event (otherwise a heartbeat)
    minor_status: str | None  # what the event records
    cpu_seconds: float | None  # reported (None: not)
    accounting: AccountingSettings  # what CPU costs

    def values(self, before: JobStatus) -> dict[str, Any]:
        """The columns a job in `before` that takes the report sets, and their values."""
        return {name: change.value for name, change in self.columns.items() if before in change.when}

    def writes_event(self, before: JobStatus) -> bool:
        return before in self.event_from

    @property
    def needs_stored_cpu_seconds(self) -> bool:
        """Whether the charge depends on the CPU seconds the job stored before: it charges,
        and the report carries none."""
        return self.status.value in CHARGED_STATUSES and self.cpu_seconds is None

    def charge(self, cpu_seconds: float | None) -> float | None:
        """What a job holding `cpu_seconds` once it took the report is charged; None: nothing."""
        return charge_for(self.status.value, cpu_seconds, self.accounting)


def report_transition(
    status: JobStatus,
    minor_status: str | None,
    cpu_seconds: float | None,
    wall_seconds: float | None,
    at: datetime,
    accounting: AccountingSettings,
) -> ReportTransition:
    """The transition of a report of `status` (not Waiting: that is a reschedule) with the
    minor status, CPU and wall seconds it states (None: none)."""
    where = _where(status, minor_status)
    always, never = where.taken_from, frozenset[JobStatus]()
    columns = {
        "status": ColumnChange(status.value, always),
        "minor_status": ColumnChange(minor_status, where.minor_status_set),
        "heartbeat_at": ColumnChange(at, always),
        "cpu_seconds": ColumnChange(cpu_seconds, never if cpu_seconds is None else always),
        "wall_seconds": ColumnChange(wall_seconds, never if wall_seconds is None else always),
        "started_at": ColumnChange(at, where.starting),
        "lease_expires_at": ColumnChange(None, where.ending_lease),
        "finished_at": ColumnChange(at, always if status in FINAL else never),
    }
    return ReportTransition(
        status=status,
        at=at,
        taken_from=where.taken_from,
        columns=columns,
        event_from=where.changing,
        minor_status=minor_status,
        cpu_seconds=cpu_seconds,
        accounting=accounting,
    )


@dataclass(frozen=True, slots=True)
class _Where:
    """The statuses before in which a report of a status does each thing."""

    taken_from: frozenset[JobStatus]
    minor_status_set: frozenset[JobStatus]
    starting: frozenset[JobStatus]
    ending_lease: frozenset[JobStatus]
    changing: frozenset[JobStatus]


@lru_cache(maxsize=1024)  # a report's status and minor status: a few pairs, the same again and again
def _where(status: JobStatus, minor_status: str | None) -> _Where:
    taken_from = frozenset(before for before in JobStatus if allowed(before, status))

    def where(rule: Callable[[JobStatus], bool]) -> frozenset[JobStatus]:
        return frozenset(before for before in taken_from if rule(before))

    return _Where(
        taken_from=taken_from,
        # a heartbeat that states none keeps it; anything else sets what it states, or none
        minor_status_set=where(lambda b: not keeps_minor_status(b, status, minor_status)),
        starting=where(lambda b: starts(b, status)),  # confirmed: the job starts
        ending_lease=where(lambda b: ends_lease(b, status)),  # the pilot answered
        changing=where(lambda b: b is not status),  # a heartbeat is not an event
    )
