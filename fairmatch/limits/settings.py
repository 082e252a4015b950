"""`[site_limits."<site>"]`: the site limits created at start-up, in DIRAC's shape."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from fairmatch.limits.rules import DIRAC_NAMES
from fairmatch.sections import Section

LimitAttribute = Literal["job_type", "owner_group", "owner"]


class SiteLimitSettings(Section):
    """One site's limits, as DIRAC's `Sites/<site>/RunningLimit|MatchingDelay/<attribute>/<value>`."""

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
