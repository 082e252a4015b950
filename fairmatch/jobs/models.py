"""What a client sends about jobs."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from fairmatch.fields import Int, Name, NameList

MAX_CPU_TIME = 10**9  # ~31 years: anything beyond is a unit mistake
MAX_SECONDS = 1e12

PRIORITY_CLASS_MIN, PRIORITY_CLASS_MAX = -1023, 1024


class JobSpec(BaseModel):
    """One job to queue. Lists may also be given as a single string."""

    model_config = ConfigDict(extra="forbid")

    owner: Name
    owner_group: Name
    vo: Name | None = Field(None, description="Defaults to the `jobs.default_vo` setting.")
    cpu_time: Int | None = Field(
        None, ge=0, le=MAX_CPU_TIME, description="CPU seconds needed; defaults to `jobs.default_cpu_time`."
    )
    sites: NameList = []
    banned_sites: NameList = []
    grid_ces: NameList = []
    platforms: NameList = []
    job_types: NameList = []
    tags: NameList = []
    user_priority: Int = Field(1, ge=0, le=10, description="0 = background, 10 = always first.")
    priority_class: Int | None = Field(
        None, ge=PRIORITY_CLASS_MIN, le=PRIORITY_CLASS_MAX, description="None: the job class's default, or 0."
    )
    job_class: Name | None = None
    account: Name | None = Field(
        None,
        description="The Slurm account usage is charged to; default the owner group. With an imported "
        "association tree, (account, owner) must be one of its associations.",
    )
    payload: JsonValue = Field(None, description="Opaque JSON handed to the pilot (size-limited).")

    @property
    def charged_account(self) -> str:
        """The account the job's usage is charged to: the one given, else its owner group."""
        return self.account or self.owner_group


class SubmitRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    jobs: list[JobSpec] = Field(min_length=1, max_length=10_000)


ReportedStatus = Literal["Running", "Done", "Failed", "Stalled", "Waiting"]


class StatusUpdate(BaseModel):
    """A status report; `Running` again for a running job is its heartbeat."""

    model_config = ConfigDict(extra="forbid")

    status: ReportedStatus
    minor_status: Name | None = None
    cpu_seconds: float | None = Field(None, ge=0, le=MAX_SECONDS)
    wall_seconds: float | None = Field(None, ge=0, le=MAX_SECONDS)
