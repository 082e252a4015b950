"""A job's requirements in canonical form, and the hash that names its task queue.

Pure logic: no database, no web framework.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fairmatch.taskqueues.matching_fields import AMOUNT_FIELDS

ANY = "any"

# The requirement fields that hold a list of values (one task_queues column each).
MULTI_VALUE_FIELDS = ("sites", "banned_sites", "grid_ces", "platforms", "job_types", "tags")

# Fields where a job listing `any` means "no restriction" (a DIRAC JDL habit:
# Site = ANY). Tags and banned sites are literal.
WILDCARD_FIELDS = ("sites", "grid_ces", "platforms", "job_types")


def bucket_cpu_time(cpu_time: int, buckets: Sequence[int]) -> int:
    """Move `cpu_time` up to the first bucket >= it, capped at the last bucket."""
    index = bisect_left(buckets, cpu_time)
    return buckets[min(index, len(buckets) - 1)]


def real_priority(user_priority: int) -> float:
    """DIRAC's mapping: 0 is background, 10 always goes first within its entity."""
    if user_priority <= 0:
        return 1e-5
    if user_priority >= 10:
        return 1e6
    return float(user_priority)


def levels_of(stored: Sequence[Sequence[float]] | None) -> dict[float, int]:
    """`task_queues.levels`, [[real priority, jobs], ...], as {real priority: jobs}."""
    return {float(p): int(n) for p, n in stored or ()}


def load_of(levels: Mapping[float, int]) -> dict[str, float]:
    """A TQ's load as the policies weigh it, from its waiting jobs per level: their number,
    and the sum and the average of their real priorities."""
    jobs = sum(levels.values())
    weighted = sum(p * n for p, n in levels.items())
    return {"jobs": jobs, "sum_rp": weighted, "avg_rp": weighted / jobs}


def stored_levels(levels: Mapping[float, int]) -> list[list[float]]:
    """{real priority: jobs} as `task_queues.levels` stores it: by level, empty ones left out."""
    return [[p, n] for p, n in sorted(levels.items()) if n > 0]


def normalise_values(values: Iterable[str] | None, *, wildcard: bool) -> tuple[str, ...]:
    cleaned = sorted({v.strip() for v in values or () if v and v.strip()})
    if wildcard and any(v.lower() == ANY for v in cleaned):
        return ()
    return tuple(cleaned)


@dataclass(frozen=True, slots=True)
class Requirements:
    owner: str
    owner_group: str
    vo: str
    cpu_time: int
    priority_class: int
    job_class: str | None = None
    # The account the jobs are charged to, whose association gives the queue its fair-share
    # factor; "" stands for the owner group. Left out of the canonical form when it is the
    # owner group, so that the queues made before accounts were part of a queue keep their hash.
    account: str = ""
    sites: tuple[str, ...] = ()
    banned_sites: tuple[str, ...] = ()
    grid_ces: tuple[str, ...] = ()
    platforms: tuple[str, ...] = ()
    job_types: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    # the amounts the jobs ask for (`matching_fields.AMOUNTS`), by name, those above 0 only:
    # an amount of 0 is none, and left out of the canonical form, so that the queues made
    # before an amount existed keep their hash
    amounts: tuple[tuple[str, int], ...] = ()
    # the hash, once asked for: a submission names each queue by it more than once
    _digest: str | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.account:
            object.__setattr__(self, "account", self.owner_group)
        unknown = {name for name, _ in self.amounts} - set(AMOUNT_FIELDS)
        if unknown:
            raise TypeError(f"unknown amounts: {sorted(unknown)}")
        object.__setattr__(self, "amounts", tuple(sorted((n, int(v)) for n, v in self.amounts if v)))

    @classmethod
    def build(
        cls,
        *,
        owner: str,
        owner_group: str,
        vo: str,
        cpu_time: int,
        priority_class: int,
        buckets: Sequence[int],
        job_class: str | None = None,
        account: str = "",
        **given: Any,
    ) -> Requirements:
        """`given`: the value lists (MULTI_VALUE_FIELDS) and the amounts (AMOUNT_FIELDS), by name."""
        unknown = set(given) - set(MULTI_VALUE_FIELDS) - set(AMOUNT_FIELDS)
        if unknown:
            raise TypeError(f"unknown requirement fields: {sorted(unknown)}")
        return cls(
            owner=owner,
            owner_group=owner_group,
            vo=vo,
            cpu_time=bucket_cpu_time(cpu_time, buckets),
            priority_class=priority_class,
            job_class=job_class,
            account=account,
            amounts=tuple((name, given[name]) for name in AMOUNT_FIELDS if given.get(name)),
            **{
                field: normalise_values(given.get(field), wildcard=field in WILDCARD_FIELDS)
                for field in MULTI_VALUE_FIELDS
            },
        )

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Requirements:
        fields: dict[str, Any] = {
            k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k not in AMOUNT_FIELDS
        }
        return cls(**fields, amounts=tuple((name, data[name]) for name in AMOUNT_FIELDS if name in data))

    def to_json(self) -> dict[str, Any]:
        """The canonical form (what the hash digests, what a job's spec stores): an amount
        of 0 and an account that is the owner group are left out, and `from_json` reads
        their absence as those defaults."""
        canonical: dict[str, Any] = {}
        for name in _PLAIN_FIELDS:
            value = getattr(self, name)
            if isinstance(value, tuple):
                canonical[name] = list(value)
            elif name != "account" or value != self.owner_group:
                canonical[name] = value
        canonical.update(self.amounts)
        return canonical

    def amount(self, name: str) -> int:
        """The amount `name` the jobs ask for; 0: none."""
        if name not in AMOUNT_FIELDS:
            raise KeyError(name)
        return dict(self.amounts).get(name, 0)

    def values(self, field: str) -> tuple[str, ...]:
        values: tuple[str, ...] = getattr(self, field)
        return values

    @property
    def hash(self) -> str:
        """Canonical digest: identical requirements, identical TQ."""
        if self._digest is None:
            canonical = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
            object.__setattr__(self, "_digest", hashlib.sha256(canonical.encode()).hexdigest())
        assert self._digest is not None
        return self._digest


def requeued(stored: Mapping[str, Any], priority_class: int, account: str) -> Requirements:
    """The requirements a job is queued again with: those its spec stores, in the priority
    class it has now (a change of class does not rewrite the spec), charged to its account
    (the spec of a job queued before accounts were part of a queue does not name it)."""
    return dataclasses.replace(Requirements.from_json(stored), priority_class=priority_class, account=account)


# the fields of the canonical form: every requirement, each amount by its name, not the cached digest
_PLAIN_FIELDS = tuple(f.name for f in dataclasses.fields(Requirements) if f.init and f.name != "amounts")
CANONICAL_FIELDS = (*_PLAIN_FIELDS, *AMOUNT_FIELDS)
