"""`[matching]`: how a pilot's request picks a task queue and a job."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field

from fairmatch.fields import Name
from fairmatch.sections import Section


class Lottery(StrEnum):
    exact = "exact"
    dirac = "dirac"
    highest = "highest"


class MatchingSettings(Section):
    lottery: Lottery | None = Field(
        None,
        description="How a task queue is drawn among the finalists: `exact` "
        "(P proportional to priority), `dirac` (DIRAC's RAND()/Priority, biased) or "
        "`highest` (deterministic, random tie-break). Unset: the policy's own "
        "(dirac: exact; rank and multifactor: highest).",
    )
    prefer_longest_cpu: bool = Field(
        False,
        description="Among eligible TQs of the top priority class, only draw from the longest CPU bucket "
        "(the 2009 design's order, CPU time before the lottery). false: CPU time is only a condition (a TQ "
        "fits when its jobs need no more than the pilot offers) and the priority lottery draws among all that "
        "fit, as DIRAC 9's TaskQueueDB. true lets a backlog in the longest bucket take every long pilot "
        "whatever the shares (the status's `share_drift` says when it does); deployments that relied on "
        "the former default keep it by setting true. Refused under multifactor with a job-size weight.",
    )
    jobs_per_try: int = Field(
        10, ge=1, le=1000, description="Inside a TQ, pick at random among this many lowest job ids."
    )
    claim_attempts: int = Field(8, ge=1, le=100, description="How often a lost claim is retried before answering 204.")
    refresh_seconds: float = Field(
        0.25,
        gt=0,
        le=60,
        description="How often each process reads the task queues other processes changed "
        "(a new TQ is matchable everywhere within about this long).",
    )
    refresh_margin_seconds: float = Field(
        1.0,
        ge=0,
        le=600,
        description="Each read looks back this far before the previous one, for transactions "
        "that changed a TQ before it and committed after it.",
    )
    reload_seconds: float = Field(
        60.0,
        gt=0,
        description="How often each process reads the ids of all task queues, so that those "
        "other processes deleted leave its copy.",
    )
    unstated_fields: Literal["strict", "dirac"] = Field(
        "dirac",
        description="A grid CE, platform or job type the resource leaves out: `dirac` (DIRAC's TaskQueueDB) "
        "puts no condition on that field; `strict` gives it only queues that list none. Deployments that "
        "relied on the former default keep it by setting `strict`; a request's own `unstated_fields` "
        "overrides this.",
    )
    masked_site_job_types: list[Name] = Field(
        default_factory=lambda: ["Test"],
        max_length=100,
        description="A pilot at a site in the site mask (banned) is matched only jobs whose job types "
        "list one of these; jobs naming no job type are not matched there. [] gives such a pilot nothing.",
    )


class ResolvedMatching(MatchingSettings):
    """`[matching]` as the matcher reads it (`Settings.effective_matching`): the policy's lottery filled in."""

    lottery: Lottery
