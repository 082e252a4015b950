"""A task queue as the API shows it: its keys, priority, waiting jobs and value lists."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field


class TaskQueue(BaseModel):
    task_queue_id: int
    owner: str
    owner_group: str
    account: str = Field(
        description="The account the queue's jobs are charged to (their owner group unless they name another): "
        "its association gives the queue its fair-share factor under `multifactor`."
    )
    vo: str
    cpu_time: int
    priority_class: int
    job_class: str | None
    priority: float
    priority_origin: dict[str, Any] | None = Field(
        description="How the priority was made: policy, entity, its share, corrections, the TQ's weight "
        "(dirac: also its own priority and its site variants, summed or not)."
    )
    jobs: int = Field(description="Waiting jobs.")
    sites: list[str]
    banned_sites: list[str]
    grid_ces: list[str]
    platforms: list[str]
    job_types: list[str]
    tags: list[str]
    min_ram_mb: int = Field(
        description="The memory (MB) the queue's jobs need: a resource's MaxRAM must reach it; 0: none."
    )
    max_ram_mb: int = Field(description="The most memory (MB) the queue's jobs may use; 0: no limit.")
    created_at: datetime
