"""`[taskqueues]`: the CPU-time segments jobs are queued by, and the sweep of empty queues."""

from __future__ import annotations

import itertools

from pydantic import Field, field_validator

from fairmatch.sections import Section

# DIRAC's current CPU-time segments (seconds).
DIRAC_CPU_BUCKETS = [
    360, 1800, 3600, 21600, 43200, 86400, 172800, 259200,
    345600, 518400, 691200, 864000, 1080000,
]  # fmt: skip


class TaskQueueSettings(Section):
    cpu_buckets: list[int] = Field(
        default_factory=lambda: list(DIRAC_CPU_BUCKETS),
        description="CPU-time segments in seconds; a job's cpu_time moves up to the first "
        "segment >= it, capped at the last. Strictly increasing.",
    )

    sweep_interval_seconds: float = Field(60, gt=0, description="How often task queues left empty are deleted.")

    keep_empty_seconds: float = Field(
        60,
        ge=0,
        description="How long a task queue without jobs is kept unchanged before the sweep deletes "
        "it. Meanwhile a submission with the same requirements refills it instead of creating a new "
        "queue, which would re-split its group's shares at once. 0: an empty queue goes at the next sweep.",
    )

    @field_validator("cpu_buckets")
    @classmethod
    def _strictly_increasing(cls, buckets: list[int]) -> list[int]:
        if not buckets:
            raise ValueError("cpu_buckets must not be empty")
        if buckets[0] <= 0:
            raise ValueError("cpu_buckets must be positive")
        if any(b <= a for a, b in itertools.pairwise(buckets)):
            raise ValueError(f"cpu_buckets must be strictly increasing, got {buckets}")
        return buckets
