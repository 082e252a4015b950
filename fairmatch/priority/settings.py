"""`[priority]` and `[groups."<name>"]`: how task-queue priorities are computed, and the groups' shares."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator

from fairmatch.priority.groups import DEFAULT_JOB_SHARE
from fairmatch.sections import Section


class RankSettings(Section):
    window_days: float = Field(
        24,
        gt=0,
        description="USED is the fraction of usage in this window. Under rank every charge is kept "
        "this long; the other policies read only the folded totals and drop a charge once folded.",
    )
    vo_factor: float = Field(100, ge=0, description="FACTOR of the VO level.")
    group_factor: float = Field(100, ge=0, description="FACTOR of the group level.")
    user_factor: float = Field(100, ge=0, description="FACTOR of the user level.")
    vo_shares: dict[str, float] = Field(
        default_factory=dict, description="TARGET of each VO (normalised); VOs not listed share equally."
    )


class MultifactorWeights(Section):
    """What each factor, in [0, 1], is multiplied by before they are added up."""

    fairshare: float = Field(10000, ge=0, description="Weight of the association's fair-share factor.")
    age: float = Field(1000, ge=0, description="Weight of how long the oldest job has waited.")
    job_size: float = Field(100, ge=0, description="Weight of the CPU bucket's position.")
    user: float = Field(100, ge=0, description="Weight of the jobs' own (user) priority.")
    queue: float = Field(100, ge=0, description="Weight of the job class's priority.")
    qos: float = Field(1000, ge=0, description="Weight of the group's priority level.")


class MultifactorSettings(Section):
    weights: MultifactorWeights = Field(default_factory=MultifactorWeights)
    max_age_seconds: float = Field(7 * 86400, gt=0, description="The age factor saturates here.")
    favour: Literal["small", "large"] = Field("small", description="Which CPU buckets the job-size factor favours.")
    fairshare: Literal["classic", "fair_tree"] = Field(
        "classic", description="classic F = 2^(-U/S), or Fair Tree ranks."
    )


class SliceConfig(BaseModel):
    """One time slice of a corrector instance."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    time_span: int = Field(
        gt=0, validation_alias=AliasChoices("time_span", "TimeSpan"), description="Seconds of history the slice covers."
    )
    weight: float = Field(
        gt=0, validation_alias=AliasChoices("weight", "Weight"), description="The slice's weight among the instance's."
    )
    max_correction: float = Field(
        ge=1,
        validation_alias=AliasChoices("max_correction", "MaxCorrection"),
        description="The slice's correction stays within [1/max_correction, max_correction].",
    )


class InstanceConfig(BaseModel):
    """One instance of DIRAC's WMSHistory share corrector: between groups (no `group`)
    or between the owners of one group (`group` set)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    group: str | None = Field(
        None,
        validation_alias=AliasChoices("group", "Group"),
        description="Correct between the owners of this group; unset: between groups.",
    )
    max_global_correction: float = Field(
        3.0,
        ge=1,
        validation_alias=AliasChoices("max_global_correction", "MaxGlobalCorrectionFactor", "MaxGlobalCorrection"),
        description="The weighted mean of the slices' corrections stays within [1/it, it].",
    )
    slices: dict[str, SliceConfig] = Field(min_length=1, description="The time slices, by name.")


class CorrectionsConfig(BaseModel):
    """`[priority.corrections]`: the share corrector instances.

    DIRAC's key names (TimeSpan, Weight, MaxCorrection, MaxGlobalCorrectionFactor
    or its alias MaxGlobalCorrection, Group) are accepted alongside snake_case.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    instances: dict[str, InstanceConfig] = Field(default_factory=dict, description="The instances, by name.")

    def longest_time_span(self) -> int:
        return max((s.time_span for i in self.instances.values() for s in i.slices.values()), default=0)


class PrioritySettings(Section):
    policy: Literal["dirac", "rank", "multifactor"] = Field(
        "dirac", description="How task-queue priorities are computed."
    )
    interval_seconds: float = Field(
        120,
        gt=0,
        description="How often the priority loop folds the logged charges into usage and recomputes every TQ "
        "(DIRAC: 120 s); usage seen by the policies and sshare lags a charge by at most this.",
    )
    tq_weight: Literal["avg", "sum"] = Field(
        "avg",
        description="How an entity's share is split over its TQs: by the average (`avg`) or the "
        "sum (`sum`) of their jobs' real priorities.",
    )
    sum_site_variants: bool = Field(
        True,
        description="dirac policy: the task queues of one entity whose definitions differ only in sites, "
        "banned sites or RAM each get the sum of their priorities, as DIRAC 9 does; false: each its own.",
    )
    reported_running_seconds: float = Field(
        600,
        gt=0,
        description="How long running jobs reported by another system (`PUT /running/{source}`, DIRAC's JobDB "
        "through the DIRAC extension) count in the samples after the report: a source silent for longer counts "
        "nothing, rather than its last figures forever.",
    )
    sample_seconds: float = Field(
        60, gt=0, description="How often running jobs per group and owner are sampled for history."
    )
    corrections_enabled: bool = Field(False, description="Apply the WMSHistory share corrections.")
    corrections_file: Path | None = Field(
        None, description="Share corrections in DIRAC CFG (`.cfg`) or TOML (`.toml`) form."
    )
    corrections: CorrectionsConfig = Field(
        default_factory=CorrectionsConfig, description="Share corrections given inline."
    )
    rank: RankSettings = Field(default_factory=RankSettings)
    multifactor: MultifactorSettings = Field(default_factory=MultifactorSettings)

    def charges_kept(self) -> timedelta:
        """How long a folded charge is kept: rank's window reads each charge, the other policies none."""
        return timedelta(days=self.rank.window_days) if self.policy == "rank" else timedelta(0)

    @model_validator(mode="after")
    def _read_by_the_policy(self) -> PrioritySettings:
        """A setting only another policy reads would silently do nothing: refuse it."""
        if self.corrections_enabled and self.policy != "dirac":
            raise ValueError(
                f"priority.corrections_enabled = true: share corrections are applied by the dirac "
                f"policy only, and priority.policy is {self.policy!r}"
            )
        if not self.sum_site_variants and self.policy != "dirac":
            raise ValueError(
                f"priority.sum_site_variants = false: site variants are summed by the dirac policy only, "
                f"and priority.policy is {self.policy!r}"
            )
        for section in ("rank", "multifactor"):
            if section in self.model_fields_set and self.policy != section:
                raise ValueError(
                    f"[priority.{section}] is read by the {section} policy only, and priority.policy is "
                    f"{self.policy!r}: remove the section or change the policy"
                )
        return self


class GroupSettings(Section):
    job_share: float = Field(DEFAULT_JOB_SHARE, ge=0, description="The group's share (DIRAC JobShare).")
    properties: list[str] = Field(default_factory=list, description="e.g. ['JOB_SHARING'].")
    allow_background_tqs: bool = Field(
        False, description="A queue of background jobs (average real priority <= 0.1) gets the minimum priority."
    )
    priority: int = Field(0, description="The group's priority level.")
