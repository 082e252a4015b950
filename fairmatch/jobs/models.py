"""What a client sends about jobs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationInfo, create_model, field_validator

from fairmatch.accounting.usage import charged_account
from fairmatch.fields import NAMES_TEXT_FORMS, Int, Name, NameList
from fairmatch.taskqueues.matching_fields import AMOUNTS, MAX_CPU_TIME, MAX_RAM_MB

__all__ = ["MAX_CPU_TIME", "MAX_RAM_MB", "JobSpec"]

MAX_SECONDS = 1e12

PRIORITY_CLASS_MIN, PRIORITY_CLASS_MAX = -1023, 1024


class _Placement(BaseModel):
    """Who the job is and where it may run (JobSpec's first fields; its amounts follow)."""

    model_config = ConfigDict(extra="forbid")

    owner: Name = Field(description='Spaces around it are dropped: `"  alice  "` is the owner `alice`.')
    owner_group: Name = Field(description="Spaces around it are dropped.")
    vo: Name | None = Field(None, description="Defaults to the `jobs.default_vo` setting.")
    cpu_time: Int | None = Field(
        None, ge=0, le=MAX_CPU_TIME, description="CPU seconds needed; defaults to `jobs.default_cpu_time`."
    )
    sites: NameList = Field([], description=f"Where the job may run; none: anywhere. {NAMES_TEXT_FORMS}")
    # after sites: the check of banned_sites reads them
    banned_sites: NameList = Field([], description=f"Where the job may not run. {NAMES_TEXT_FORMS}")
    grid_ces: NameList = Field([], description=f"The CEs the job may run behind; none: any. {NAMES_TEXT_FORMS}")
    platforms: NameList = Field([], description=f"The platforms the job may run on; none: any. {NAMES_TEXT_FORMS}")
    job_types: NameList = Field(
        [], description=f"The job types of the resources that may take it; none: any. {NAMES_TEXT_FORMS}"
    )
    tags: NameList = Field([], description=f"Tags a resource must all offer. {NAMES_TEXT_FORMS}")

    @field_validator("banned_sites")
    @classmethod
    def _a_site_left_to_run_at(cls, banned_sites: list[str], info: ValidationInfo) -> list[str]:
        sites = info.data.get("sites")
        if sites and set(sites) <= set(banned_sites):
            raise ValueError(f"bans every site in sites ({', '.join(sorted(set(sites)))}): the job could never run")
        return banned_sites


# the amounts a job may ask for, each 0 (none) unless given, as declared
_amount_fields: dict[str, Any] = {
    amount.name: (Int, Field(0, ge=0, le=amount.maximum, description=amount.description)) for amount in AMOUNTS
}
if TYPE_CHECKING:
    _WithAmounts = _Placement
else:
    _WithAmounts = create_model("_WithAmounts", __base__=_Placement, **_amount_fields)


class JobSpec(_WithAmounts):
    """One job to queue. Spaces around a name are dropped (`"  alice  "` is `alice`); a list of
    names may also be given as one string of them, separated by commas, as DIRAC writes lists."""

    model_config = ConfigDict(extra="forbid")

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
    external_id: Name | None = Field(
        None,
        description="The submitter's own id for the job (DIRAC's JobID), by which it is found, withdrawn and "
        "matched. One unfinished job holds it at a time: submitting it again replaces a Waiting or Held "
        "holder (which ends Killed) and is refused (409) while the holder is Matched, Running or Stalled. "
        "A finished or handed-off job gives it up, so that the id may be used again.",
    )

    @field_validator("min_ram_mb")
    @classmethod
    def _min_within_max(cls, min_ram_mb: int, info: ValidationInfo) -> int:
        max_ram_mb = info.data.get("max_ram_mb")
        if max_ram_mb and min_ram_mb > max_ram_mb:
            raise ValueError(f"min_ram_mb {min_ram_mb} is above max_ram_mb {max_ram_mb}")
        return min_ram_mb

    @property
    def charged_account(self) -> str:
        """The account the job's usage is charged to: the one given, else its owner group."""
        return charged_account(self)

    def amounts(self) -> dict[str, int]:
        """The amounts the job asks for, by name (0: none)."""
        return {amount.name: getattr(self, amount.name) for amount in AMOUNTS}


class SubmitRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    jobs: list[JobSpec] = Field(min_length=1, max_length=10_000)

    @field_validator("jobs")
    @classmethod
    def _external_ids_once(cls, jobs: list[JobSpec]) -> list[JobSpec]:
        seen: set[str] = set()
        for spec in jobs:
            if spec.external_id is not None:
                if spec.external_id in seen:
                    raise ValueError(f"external_id {spec.external_id!r} is given to two jobs of one submission")
                seen.add(spec.external_id)
        return jobs


ReportedStatus = Literal["Running", "Done", "Failed", "Stalled", "Waiting"]


class StatusUpdate(BaseModel):
    """A status report; `Running` again for a running job is its heartbeat."""

    model_config = ConfigDict(extra="forbid")

    status: ReportedStatus
    minor_status: Name | None = None
    cpu_seconds: float | None = Field(None, ge=0, le=MAX_SECONDS)
    wall_seconds: float | None = Field(None, ge=0, le=MAX_SECONDS)


MAX_RETENTION_SECONDS = 100 * 365 * 86400  # a century: anything beyond is a unit mistake
FinalStatus = Literal["Done", "Failed", "Killed", "HandedOff"]


class PurgeRequest(BaseModel):
    """An admin's one-off purge of finished jobs."""

    model_config = ConfigDict(extra="forbid")

    older_than_seconds: float = Field(
        ge=1, le=MAX_RETENTION_SECONDS, description="Purge the jobs that finished at least this long ago (≥ 1 s)."
    )
    statuses: list[FinalStatus] = Field(
        ["Done", "Failed", "Killed", "HandedOff"],
        min_length=1,
        max_length=4,
        description="The final statuses to purge.",
    )
    dry_run: bool = Field(False, description="Only count the jobs that would be purged.")
