"""Configuration of DIRAC's WMSHistory share corrector.

An instance corrects the shares between groups (no `group`) or between the
owners of one group (`group` set). Each has time slices; DIRAC's key names
(TimeSpan, Weight, MaxCorrection, MaxGlobalCorrectionFactor or its alias
MaxGlobalCorrection, Group) are accepted alongside snake_case.
"""

from __future__ import annotations

from pydantic import AliasChoices, BaseModel, ConfigDict, Field


class SliceConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    time_span: int = Field(gt=0, validation_alias=AliasChoices("time_span", "TimeSpan"))
    weight: float = Field(gt=0, validation_alias=AliasChoices("weight", "Weight"))
    max_correction: float = Field(ge=1, validation_alias=AliasChoices("max_correction", "MaxCorrection"))


class InstanceConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    group: str | None = Field(
        None,
        validation_alias=AliasChoices("group", "Group"),
        description="Correct between the owners of this group; unset: between groups.",
    )
    max_global_correction: float = Field(
        3.0,
        ge=1,
        validation_alias=AliasChoices(
            "max_global_correction", "MaxGlobalCorrectionFactor", "MaxGlobalCorrection"
        ),
    )
    slices: dict[str, SliceConfig] = Field(min_length=1)


class CorrectionsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    instances: dict[str, InstanceConfig] = Field(default_factory=dict)

    def longest_time_span(self) -> int:
        return max((s.time_span for i in self.instances.values() for s in i.slices.values()), default=0)
