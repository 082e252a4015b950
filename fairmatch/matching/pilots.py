"""A pilot on record as the API shows it: where it asked for jobs, and what it got."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field


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
