"""What every priority policy knows about a task queue (pure data)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class TqFacts:
    tq_id: int
    owner: str
    owner_group: str
    account: str  # charged with the jobs' usage: its association gives the fair-share factor
    vo: str
    cpu_time: int  # the CPU bucket
    priority_class: int
    job_class: str | None
    jobs: int  # waiting jobs
    avg_real_priority: float
    sum_real_priority: float
    oldest_submitted_at: datetime  # of its waiting jobs, timezone-aware UTC
