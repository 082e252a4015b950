"""Slurm/Flux-style multifactor priorities for task queues (pure logic).

priority = sum over factors of weight * factor, every factor in [0, 1]:

- fairshare: the fair-share factor of the TQ's association, (account, owner):
  the account its jobs are charged to, which is their owner group unless they name
  another, as Slurm looks a job's factor up by its association; classic or Fair Tree
  (fairmatch.priority.fairshare).
- age: how long the TQ's oldest waiting job has waited, over `max_age_seconds`,
  saturating at 1.
- job_size: the position of the TQ's CPU bucket among the configured buckets,
  pos/(n-1) when large jobs are favoured, 1 - pos/(n-1) when small ones are
  (1 with a single bucket: nothing to tell apart).
- user: the owner's own priority, the average real priority of the TQ's jobs
  over 10 and capped at 1. Real priority is the user priority for 1..9, so
  the default user priority 1 gives 0.1 and 9 gives 0.9; priority 0 (real
  1e-5) gives ~0 and 10 (real 1e6) gives 1.
- queue: the job class's priority over 1000, clamped to [0, 1] (Slurm's
  partition factor); 0 for a TQ without a job class.
- qos: the group's priority level, -1000..1000, mapped linearly onto [0, 1]
  as (p + 1000) / 2000: -1000 gives 0, the default 0 gives 0.5, 1000 gives 1.

No TQ goes below 0.001 (as in the dirac policy), so the `exact` lottery can
still draw it. Each TQ's origin lists every factor, its weight and its
contribution: what sprio shows.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from fairmatch.priority.facts import TqFacts
from fairmatch.priority.settings import MultifactorSettings

MIN_PRIORITY = 0.001
USER_PRIORITY_SCALE = 10.0  # the highest user priority
QUEUE_PRIORITY_SCALE = 1000.0
QOS_LEVEL_MIN, QOS_LEVEL_MAX = -1000.0, 1000.0  # a group's priority level range
FACTORS = ("fairshare", "age", "job_size", "user", "queue", "qos")

Origin = dict[str, Any]


def clamp01(value: float) -> float:
    return min(1.0, max(0.0, value))


def age_factor(oldest_submitted_at: datetime, now: datetime, max_age_seconds: float) -> float:
    waited = (now - oldest_submitted_at).total_seconds()
    return clamp01(waited / max_age_seconds)


def bucket_position(cpu_time: int, buckets: Sequence[int]) -> int:
    """Index of the TQ's bucket; a value off the current list (buckets reconfigured)
    takes the first bucket at or above it, capped at the last, as submission would."""
    return min(bisect_left(buckets, cpu_time), len(buckets) - 1)


def job_size_factor(cpu_time: int, buckets: Sequence[int], favour: str) -> float:
    if len(buckets) < 2:
        return 1.0
    position = bucket_position(cpu_time, buckets) / (len(buckets) - 1)
    return position if favour == "large" else 1.0 - position


def user_factor(avg_real_priority: float) -> float:
    return clamp01(avg_real_priority / USER_PRIORITY_SCALE)


def queue_factor(job_class_priority: float | None) -> float:
    return 0.0 if job_class_priority is None else clamp01(job_class_priority / QUEUE_PRIORITY_SCALE)


def qos_factor(group_priority: float) -> float:
    return clamp01((group_priority - QOS_LEVEL_MIN) / (QOS_LEVEL_MAX - QOS_LEVEL_MIN))


def factors_of(
    tq: TqFacts,
    now: datetime,
    settings: MultifactorSettings,
    fairshare_factor_of: Callable[[str, str], float],
    group_priority_of: Callable[[str], float],
    job_class_priority_of: Callable[[str], float | None],
    buckets: Sequence[int],
) -> dict[str, float]:
    """Every factor of one TQ, each in [0, 1]."""
    class_priority = None if tq.job_class is None else job_class_priority_of(tq.job_class)
    return {
        "fairshare": clamp01(fairshare_factor_of(tq.account, tq.owner)),
        "age": age_factor(tq.oldest_submitted_at, now, settings.max_age_seconds),
        "job_size": job_size_factor(tq.cpu_time, buckets, settings.favour),
        "user": user_factor(tq.avg_real_priority),
        "queue": queue_factor(class_priority),
        "qos": qos_factor(group_priority_of(tq.owner_group)),
    }


def explain(factors: dict[str, float], settings: MultifactorSettings) -> tuple[float, Origin]:
    """The weighted sum (floored at MIN_PRIORITY) and its sprio-style explanation."""
    weights = settings.weights
    detail = {
        name: {"value": value, "weight": getattr(weights, name), "contribution": getattr(weights, name) * value}
        for name, value in factors.items()
    }
    total = sum(d["contribution"] for d in detail.values())
    priority = max(total, MIN_PRIORITY)
    origin = {
        "policy": "multifactor",
        "factors": detail,
        "total": priority,
        "floored": total < MIN_PRIORITY,
    }
    return priority, origin


def decide(
    facts: Sequence[TqFacts],
    now: datetime,
    settings: MultifactorSettings,
    fairshare_factor_of: Callable[[str, str], float],
    group_priority_of: Callable[[str], float],
    job_class_priority_of: Callable[[str], float | None],
    buckets: Sequence[int],
) -> dict[int, tuple[float, Origin]]:
    """{tq_id: (priority, origin)} for every TQ.

    `fairshare_factor_of(account, owner)` gives the association's factor,
    `group_priority_of(group)` the group's priority level (-1000..1000, 0 when
    unknown), `job_class_priority_of(name)` the class's priority (None when
    unknown); `buckets` are the configured CPU-time buckets.
    """
    decided: dict[int, tuple[float, Origin]] = {}
    for tq in facts:
        factors = factors_of(tq, now, settings, fairshare_factor_of, group_priority_of,
                             job_class_priority_of, buckets)  # fmt: skip
        priority, origin = explain(factors, settings)
        origin.update(owner=tq.owner, owner_group=tq.owner_group, account=tq.account)
        decided[tq.tq_id] = (priority, origin)
    return decided
