"""`[jobs]`: submission defaults, the matched lease and the stalled-job watchdog."""

from __future__ import annotations

from pydantic import Field

from fairmatch.sections import Section


class JobSettings(Section):
    matched_lease_seconds: int = Field(
        7200, ge=1, description="How long a Matched job waits for its pilot to confirm (DIRAC MatchedTime)."
    )
    lease_sweep_seconds: float = Field(
        60, gt=0, description="How often Matched jobs past their lease are put back to Waiting."
    )
    max_payload_bytes: int = Field(65536, ge=0, description="Largest JSON payload per job.")
    stall_timeout_seconds: int = Field(
        7200, ge=1, description="A Running job silent this long becomes Stalled (DIRAC: 2 h)."
    )
    stalled_fail_seconds: int = Field(
        3600,
        ge=1,
        description="A Stalled job silent this much longer becomes Failed ('Stalled too long'), "
        "or is rescheduled with reschedule_stalled.",
    )
    reschedule_stalled: bool = Field(False, description="Reschedule a job stalled too long instead of failing it.")
    max_reschedules: int = Field(
        3,
        ge=0,
        description="Returns to Waiting the owner did not ask for before the job fails instead "
        "(DIRAC's MaxRescheduling).",
    )
    clock_skew_seconds: float = Field(
        300,
        ge=0,
        description="How far a pilot's clock may be from the service's: a report's wall_seconds may exceed the"
        " time since the match by this much, and no more (nor its cpu_seconds the wall time × the job's"
        " processors × 1.05); beyond, the report is refused with a 422 and nothing is charged.",
    )
    max_batch: int = Field(10000, ge=1, le=10000, description="Most jobs in one POST /jobs (10 000 at most).")
    default_vo: str = Field("default", min_length=1, description="VO of jobs submitted without one.")
    default_cpu_time: int = Field(86400, ge=0, description="cpu_time of jobs submitted without one (s).")
