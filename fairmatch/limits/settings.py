"""`[site_limits."<site>"]`: the site limits created at start-up, in DIRAC's shape."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AliasChoices, Field, field_validator

from fairmatch.limits.rules import DIRAC_NAMES
from fairmatch.sections import Section

LimitAttribute = Literal["job_type", "owner_group", "owner"]


class LimitRuleSettings(Section):
    """Running limits and matching delays per job attribute and value."""

    running_limit: dict[LimitAttribute, dict[str, int]] = Field(
        default_factory=dict, description="attribute → value → most jobs Matched + Running at the site."
    )
    matching_delay: dict[LimitAttribute, dict[str, float]] = Field(
        default_factory=dict, description="attribute → value → least seconds between two matches at the site."
    )

    @field_validator("running_limit", "matching_delay", mode="before")
    @classmethod
    def _dirac_attribute_names(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {DIRAC_NAMES[k].value if k in DIRAC_NAMES else k: v for k, v in value.items()}
        return value

    @field_validator("running_limit", "matching_delay")
    @classmethod
    def _not_negative(cls, value: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
        for attribute, amounts in value.items():
            for name, amount in amounts.items():
                if amount < 0:
                    raise ValueError(f"{attribute}.{name} must not be negative, got {amount}")
        return value


class CELimitSettings(LimitRuleSettings):
    """One CE's limits, as DIRAC's `RunningLimit/<site>/CEs/<CE>/<attribute>/<value>`: they count and
    limit only the jobs matched through that CE."""

    running_limit: dict[LimitAttribute, dict[str, int]] = Field(
        default_factory=dict, description="attribute → value → most jobs Matched + Running through the CE."
    )
    matching_delay: dict[LimitAttribute, dict[str, float]] = Field(
        default_factory=dict, description="attribute → value → least seconds between two matches through the CE."
    )


class SiteLimitSettings(LimitRuleSettings):
    """One site's limits, as DIRAC's `RunningLimit|MatchingDelay/<site>/<attribute>/<value>`."""

    CEs: dict[str, CELimitSettings] = Field(
        default_factory=dict,
        validation_alias=AliasChoices("CEs", "ces"),
        description="CE name → that CE's limits, as DIRAC's `RunningLimit/<site>/CEs/<CE>`.",
    )
