"""Which jobs a listing covers: the filters of `GET /jobs` and `fairmatch jobs list`.

A parameter the model does not name is refused (`extra="forbid"`): a filter
mistyped or not supported (`?sites=X`) must not silently list every job.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from fairmatch.fields import Moment, Name
from fairmatch.jobs.lifecycle import JobStatus

MAX_ID = 2**63 - 1


class JobOrder(StrEnum):
    """The order of a listing's pages: by job id, which is the order of submission."""

    oldest = "oldest"
    newest = "newest"


class JobFilter(BaseModel):
    """Every given filter must hold (AND); a repeated `status` is any of them (OR)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    owner: Name | None = Field(None, description="Only this owner's jobs.")
    owner_group: Name | None = Field(None, description="Only jobs of this owner group.")
    account: Name | None = Field(None, description="Only jobs charged to this account.")
    status: list[JobStatus] = Field(
        default_factory=list, max_length=len(JobStatus), description="Only jobs in one of these states; repeatable."
    )
    site: Name | None = Field(None, description="Only jobs matched at this site.")
    task_queue_id: int | None = Field(None, ge=1, le=MAX_ID, description="Only jobs last queued in this task queue.")
    since: Moment | None = Field(None, description="Only jobs submitted at or after this time (ISO 8601).")
    until: Moment | None = Field(None, description="Only jobs submitted before this time (ISO 8601).")

    @field_validator("since", "until")
    @classmethod
    def _in_utc(cls, moment: datetime | None) -> datetime | None:
        """The times are stored in UTC (SQLite compares them as text)."""
        return None if moment is None else moment.astimezone(UTC)

    @model_validator(mode="after")
    def _a_window_that_can_hold_jobs(self) -> Self:
        if self.since is not None and self.until is not None and self.since >= self.until:
            raise ValueError(f"since ({self.since.isoformat()}) must be before until ({self.until.isoformat()})")
        return self


class JobQuery(JobFilter):
    """A page of a listing: the filters, its size and where it continues."""

    limit: int = Field(100, ge=1, le=1000, description="At most this many jobs in the page.")
    order: JobOrder = Field(
        JobOrder.oldest,
        description="`oldest`: in job-id order, the order of submission; `newest`: the latest submitted first. "
        "A cursor continues the order that gave it.",
    )
    after: str | None = Field(None, max_length=64, description="Continue after the page that gave this `next_cursor`.")
    cursor: str | None = Field(None, max_length=64, description="The former name of `after`, still accepted.")


class JobSelection(JobFilter):
    """The jobs a bulk action takes: the listing's filters, and when given only these ids. At
    least one must be given: an action on every job is asked for by a filter that says so."""

    job_ids: list[Annotated[int, Field(ge=1, le=MAX_ID)]] | None = Field(
        None, min_length=1, max_length=10_000, description="Only these jobs (at most 10 000)."
    )

    @model_validator(mode="after")
    def _something_selected(self) -> Self:
        if not any(getattr(self, name) for name in type(self).model_fields):
            raise ValueError("name the jobs: job_ids, or at least one of the listing's filters")
        return self
