"""A benchmark workload: task queues as job specs, their sizes, and the
popularity figures pilots are drawn from."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Any

from app.db.tables import MULTI_VALUE_FIELDS
from app.jobs.models import JobSpec
from app.jobs.store import requirements_of
from app.settings import Settings, load_settings
from app.taskqueues.requirements import Requirements


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

    @cached_property
    def hashes(self) -> tuple[str, ...]:
        return tuple(requirements_hash(r) for r in self.requirements)

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


_FIELDS = tuple(f.name for f in fields(Requirements))


def requirements_json(req: Requirements) -> dict[str, Any]:
    """Equal to req.to_json(), without dataclasses.asdict's deep copies (which
    would cost seconds over 10,000 TQs)."""
    out: dict[str, Any] = {}
    for name in _FIELDS:
        value = getattr(req, name)
        out[name] = list(value) if isinstance(value, tuple) else value
    return out


def requirements_hash(req: Requirements) -> str:
    """Equal to req.hash (the same canonical JSON), at requirements_json's speed."""
    canonical = json.dumps(requirements_json(req), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def settle(spec: dict[str, Any]) -> dict[str, Any]:
    """Leave out empty lists: the spec reads as a user would write it."""
    return {k: v for k, v in spec.items() if v != []}


def requirements(specs: Sequence[dict[str, Any]], settings: Settings | None = None) -> list[Requirements]:
    """Through the service's own path, so each hash is what POST /jobs computes."""
    settings = settings or load_settings()
    return [requirements_of(JobSpec(**spec), settings) for spec in specs]


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
