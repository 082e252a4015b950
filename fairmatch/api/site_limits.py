"""/limits: the site limits (DIRAC Limiter) every replica enforces."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, Strict, model_validator

from fairmatch.api.deps import Admin, Connection, Operators, Reading
from fairmatch.db.limits import LimitDB
from fairmatch.fields import Int, Name
from fairmatch.limits.rules import DIRAC_NAMES, WHOLE_SITE, Attribute, Limit
from fairmatch.services import limits as limit_service

router = APIRouter(prefix="/limits", tags=["limits"])

MAX_LIMITS = 10_000
MAX_RUNNING_LIMIT = 10**9
MAX_DELAY_SECONDS = 7 * 86400


def _attribute_name(value: Any) -> Any:
    """DIRAC's spelling (JobType, OwnerGroup, Owner) is accepted too."""
    return DIRAC_NAMES.get(value, value) if isinstance(value, str) else value


def _whole_site_as_none(value: Any) -> Any:
    return None if value == WHOLE_SITE else value


class LimitSpec(BaseModel):
    """One limit: at a site, or at one CE of it, for one value of a job attribute."""

    model_config = ConfigDict(extra="forbid")

    site: Name
    grid_ce: Annotated[Name | None, BeforeValidator(_whole_site_as_none)] = Field(
        None,
        description="A CE of the site: the limit then counts and limits only the jobs matched through it "
        "(DIRAC's RunningLimit/<site>/CEs/<CE>). '', null or absent: the whole site.",
    )
    attribute: Annotated[Attribute, BeforeValidator(_attribute_name)] = Field(
        description="job_type, owner_group or owner (DIRAC's JobType, OwnerGroup, Owner are accepted)."
    )
    value: Name
    running_limit: Int | None = Field(
        None,
        ge=0,
        le=MAX_RUNNING_LIMIT,
        description="At most this many jobs Matched + Running at the site (or through the CE).",
    )
    matching_delay: Annotated[float, Strict(False)] | None = Field(
        None, ge=0, le=MAX_DELAY_SECONDS, allow_inf_nan=False,
        description="At least this many seconds between two matches at the site (or through the CE).",
    )  # fmt: skip

    @model_validator(mode="after")
    def _says_something(self) -> LimitSpec:
        if self.running_limit is None and self.matching_delay is None:
            raise ValueError("a limit needs running_limit, matching_delay or both")
        return self


class LimitSet(BaseModel):
    model_config = ConfigDict(extra="forbid")

    limits: list[LimitSpec] = Field(max_length=MAX_LIMITS)

    @model_validator(mode="after")
    def _one_per_key(self) -> LimitSet:
        seen: set[tuple[str, str, str, str]] = set()
        for spec in self.limits:
            key = (spec.site, spec.grid_ce or WHOLE_SITE, spec.attribute.value, spec.value)
            if key in seen:
                raise ValueError(f"limit {'/'.join(part for part in key if part)} is given twice")
            seen.add(key)
        return self


class LimitView(BaseModel):
    site: str
    grid_ce: str = Field(description="The CE whose jobs the limit counts; '' for the whole site.")
    attribute: Attribute
    value: str
    running_limit: int | None
    matching_delay: float | None
    running: int = Field(description="Jobs of this value Matched or Running at the site (or through the CE) now.")
    last_match_at: datetime | None = Field(description="When a job of this value was last matched there.")


class LimitList(BaseModel):
    limits: list[LimitView]


@router.get("", response_model=LimitList, summary="Every site limit with its current state")
async def list_limits(caller: Operators, conn: Reading) -> dict:
    return {"limits": await LimitDB.of(conn).list()}


@router.put("", response_model=LimitList, summary="Replace every site limit (admin)")
async def put_limits(body: LimitSet, caller: Admin, conn: Connection) -> dict:
    limits = sorted(
        (
            Limit(s.site, s.attribute, s.value, s.running_limit, s.matching_delay, s.grid_ce or WHOLE_SITE)
            for s in body.limits
        ),
        key=lambda limit: limit.key,
    )
    asked = body.model_dump(mode="json")
    return {"limits": await limit_service.replace_limits(conn, limits, by=caller.sub, asked=asked)}
