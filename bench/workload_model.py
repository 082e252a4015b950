"""A benchmark workload: task queues as job specs, their sizes, and the
popularity figures pilots are drawn from."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from fairmatch.jobs.models import JobSpec
from fairmatch.jobs.submission import requirements_of
from fairmatch.settings import Settings, load_settings
from fairmatch.taskqueues.requirements import MULTI_VALUE_FIELDS, Requirements

# user priority -> share of each TQ's jobs: most jobs at the default 1, some
# raised by their owners, so every TQ of more than a handful of jobs holds
# several levels for the matcher's level draw to choose from
USER_PRIORITY_MIX = ((1, 0.60), (2, 0.25), (3, 0.15))

Mix = tuple[tuple[int, float], ...]


def priority_mix(mix: Mapping[int, float] | Iterable[tuple[int, float]]) -> Mix:
    """(user priority, share) pairs, sorted, shares summing to 1. Priorities are
    0..10 as POST /jobs takes them; shares are positive (any scale)."""
    pairs = list(mix.items()) if isinstance(mix, Mapping) else [tuple(p) for p in mix]
    priorities = [int(p) for p, _ in pairs]
    if not pairs or len(set(priorities)) != len(pairs):
        raise ValueError(f"a user-priority mix needs distinct priorities: {pairs!r}")
    if any(not 0 <= p <= 10 for p in priorities) or any(not w > 0 for _, w in pairs):
        raise ValueError(f"user priorities are 0..10 with positive shares: {pairs!r}")
    total = sum(float(w) for _, w in pairs)
    return tuple(sorted((int(p), float(w) / total) for p, w in pairs))


def parse_mix(text: str) -> Mix:
    """`1:60,2:25,3:15` -> a mix (shares in any scale)."""
    try:
        return priority_mix([(int(p), float(w)) for p, w in (part.split(":") for part in text.split(",") if part)])
    except ValueError as exc:
        raise ValueError(f"expected PRIORITY:SHARE,... such as 1:60,2:25,3:15; got {text!r} ({exc})") from None


class LevelSplit:
    """Splits runs of jobs (one submission to one TQ) over the user priorities of
    a mix. The rounding is carried from run to run: every run gets each level's
    share of its jobs to within two jobs, and all runs together get the mix to
    within a job per level, however small the runs (TQs of one job each take
    the levels in turn)."""

    def __init__(self, mix: Mix):
        self.mix = priority_mix(mix)
        self.given = [0] * len(self.mix)
        self.total = 0

    def split(self, n: int) -> list[tuple[int, int]]:
        """(user priority, jobs) of the next run of `n` jobs; levels given no job are left out."""
        self.total += n
        owed = [share * self.total - given for (_, share), given in zip(self.mix, self.given)]
        counts = [max(0, math.floor(o)) for o in owed]
        while sum(counts) > n:  # a level ahead of its share gave back less than it owed
            k = min((i for i, c in enumerate(counts) if c), key=lambda i: owed[i] - counts[i])
            counts[k] -= 1
        while sum(counts) < n:
            counts[max(range(len(counts)), key=lambda i: owed[i] - counts[i])] += 1
        for i, c in enumerate(counts):
            self.given[i] += c
        return [(p, c) for (p, _), c in zip(self.mix, counts) if c]


@dataclass(frozen=True)
class Workload:
    name: str
    seed: int
    # one job spec per TQ, as POST /jobs takes it (priority class settled to 0)
    specs: tuple[dict[str, Any], ...] = field(repr=False)
    # what the service makes of each spec; requirements[i].hash names TQ i
    requirements: tuple[Requirements, ...] = field(repr=False)
    jobs: tuple[int, ...] = field(repr=False)
    # value -> weight, for pilots of TQs that leave a field open
    sites: dict[str, float] = field(repr=False)
    platforms: dict[str, float] = field(repr=False)
    tags: dict[str, float] = field(repr=False)
    # every job type of the workload: production pilots accept them all
    job_types: tuple[str, ...] = field(repr=False)
    # pilot CPU lengths (s) -> weight
    cpu_times: dict[int, float] = field(repr=False)
    # how each TQ's jobs spread over user priorities (the loader writes them so)
    user_priorities: Mix = USER_PRIORITY_MIX
    # pilot memory sizes (MB, sent as MaxRAM) -> weight; empty: pilots state no MaxRAM
    ram_mb: dict[int, float] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "user_priorities", priority_mix(self.user_priorities))

    @cached_property
    def hashes(self) -> tuple[str, ...]:
        return tuple(r.hash for r in self.requirements)

    @property
    def total_jobs(self) -> int:
        return sum(self.jobs)

    def marginal(self, attribute: str) -> dict[str, tuple[int, int]]:
        """value -> (n_tqs, jobs) for a multi-valued field, `owner` or `owner_group`."""
        tqs: Counter[str] = Counter()
        jobs: Counter[str] = Counter()
        for req, n in zip(self.requirements, self.jobs):
            values = req.values(attribute) if attribute in MULTI_VALUE_FIELDS else (getattr(req, attribute),)
            for value in values:
                tqs[value] += 1
                jobs[value] += n
        return {v: (tqs[v], jobs[v]) for v in sorted(tqs)}


def settle(spec: dict[str, Any]) -> dict[str, Any]:
    """Leave out empty lists: the spec reads as a user would write it."""
    return {k: v for k, v in spec.items() if v != []}


def requirements(specs: Sequence[dict[str, Any]], settings: Settings | None = None) -> list[Requirements]:
    """Through the service's own path, so each hash is what POST /jobs computes."""
    settings = settings or load_settings()
    return [requirements_of(JobSpec(**spec), settings.jobs, settings.taskqueues.cpu_buckets) for spec in specs]


def duplicates(reqs: Sequence[Requirements]) -> list[int]:
    """Indices of TQs whose requirements an earlier TQ already has (equal
    requirements, equal hash)."""
    seen: set[Requirements] = set()
    dup = []
    for i, r in enumerate(reqs):
        if r in seen:
            dup.append(i)
        seen.add(r)
    return dup
