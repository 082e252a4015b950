"""A task queue as the API shows it: its keys, priority, waiting jobs and value lists."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, create_model

from fairmatch.taskqueues.matching_fields import AMOUNTS
from fairmatch.taskqueues.requirements import MULTI_VALUE_FIELDS


def with_requirements(base: type[BaseModel]) -> type[BaseModel]:
    """`base` followed by what a job asks of its slot, as the requirements declare it: the value
    lists, then the amounts (0: none). The fields of every answer that shows a job or a queue."""
    fields: dict[str, Any] = {name: (list[str], ...) for name in MULTI_VALUE_FIELDS}
    fields |= {amount.name: (int, Field(description=amount.description)) for amount in AMOUNTS}
    return create_model(f"{base.__name__}Requirements", __base__=base, **fields)


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


if TYPE_CHECKING:
    _QueueRequirements = _QueueKeys
else:
    _QueueRequirements = with_requirements(_QueueKeys)


class TaskQueue(_QueueRequirements):
    created_at: datetime
