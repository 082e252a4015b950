"""A task queue as the API shows it: its keys, priority, waiting jobs and value lists."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, create_model

from fairmatch.taskqueues.matching_fields import AMOUNTS


def with_amounts(base: type[BaseModel]) -> type[BaseModel]:
    """`base` followed by the amounts a job asks for, as declared (0: none): the fields of
    every answer that shows a job's or a queue's amounts."""
    fields: dict[str, Any] = {amount.name: (int, Field(description=amount.description)) for amount in AMOUNTS}
    return create_model(f"{base.__name__}Amounts", __base__=base, **fields)


class _QueueKeys(BaseModel):
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


if TYPE_CHECKING:
    _QueueAmounts = _QueueKeys
else:
    _QueueAmounts = with_amounts(_QueueKeys)


class TaskQueue(_QueueAmounts):
    created_at: datetime
