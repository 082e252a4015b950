"""`[accounting]`: what a finished job charges its association, and how usage decays."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fairmatch.sections import Section


class AccountingSettings(Section):
    cpu_weight: float = Field(
        1.0, gt=0, description="Charge per CPU second reported on Done/Failed (e.g. a per-core HS06 factor)."
    )
    half_life_days: float = Field(7, ge=0, description="Usage decays by half in this time; 0 = no decay.")
    reset: Literal["none", "daily", "weekly", "monthly"] = Field(
        "none", description="Start usage from zero at each period."
    )
