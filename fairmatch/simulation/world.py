"""The simulated world: waiting jobs in task queues, running jobs, their history and usage.

It stands where the database stands for the service: it holds what the
tables hold and answers what the priority policies read (`PolicyInputs`),
while the decisions are the service's own code. Waiting jobs are kept as
runs of equal jobs (same stream, same submission instant) per user-priority
level, oldest first, as a claim takes the lowest job ids of a level.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from fairmatch.accounting.associations import Association
from fairmatch.accounting.usage import (
    Charge,
    Node,
    Total,
    WindowedUsage,
    charge_of,
    charge_row,
    current_usage,
    fold,
)
from fairmatch.jobs.classes import JobClass
from fairmatch.jobs.models import JobSpec
from fairmatch.jobs.submission import requirements_key, requirements_of
from fairmatch.matching.matcher import Claimed, ClaimTarget, Missed, Outcome
from fairmatch.priority.dirac import GroupPolicy
from fairmatch.priority.groups import stored_values
from fairmatch.priority.history import sample_rows
from fairmatch.priority.rank import RankGroup
from fairmatch.settings import Settings
from fairmatch.taskqueues.matching_fields import AMOUNT_FIELDS
from fairmatch.taskqueues.requirements import MULTI_VALUE_FIELDS, Requirements, load_of, real_priority, stored_levels


@dataclass(frozen=True, slots=True)
class Submitter:
    """Who a job's usage is charged to and counted for."""

    owner: str
    owner_group: str
    account: str
    vo: str
    runtime_hours: float  # mean run time of the stream's jobs


@dataclass(slots=True)
class Queue:
    """One task queue: its requirements and its waiting jobs per real-priority level."""

    tq_id: int
    requirements: Requirements
    requirements_hash: str
    levels: dict[float, deque[list]] = field(default_factory=dict)  # level -> [[submitted, jobs, submitter]]
    counts: dict[float, int] = field(default_factory=dict)  # level -> its runs' jobs, kept for every match

    @property
    def waiting(self) -> int:
        return sum(self.counts.values())

    def oldest(self) -> float:
        return min(runs[0][0] for level, runs in self.levels.items() if self.counts[level])


class Running(NamedTuple):
    ends: float
    order: int
    submitter: Submitter
    seconds: float


class World:
    def __init__(
        self, settings: Settings, classes: dict[str, JobClass], start: datetime, tree: Sequence[Association] = ()
    ) -> None:
        self.settings = settings
        self.classes = classes
        self.start = start
        self.queues: dict[int, Queue] = {}
        self.tree = list(tree)  # the imported association tree, if any
        self._parents = {row.account: row.parent for row in self.tree if not row.is_user}
        self._by_hash: dict[str, Queue] = {}
        self._built: dict[tuple, tuple[Requirements, str]] = {}
        self.running: list[Running] = []  # a heap by end time
        self.running_per: dict[tuple[str, str], int] = {}  # (group, owner) -> running jobs
        self._order = 0
        self._usage: dict[Node, Total] = {}
        # running-job history: sample times, and per (group, owner) the running counts summed so far
        self._sample_times: list[float] = []
        self._sampled: dict[tuple[str, str], list[int]] = {}
        # charges: per (vo, group, owner) charge times and the charges summed so far
        self._charge_times: dict[tuple[str, str, str], list[float]] = {}
        self._charged: dict[tuple[str, str, str], list[float]] = {}

    def at(self, seconds: float) -> datetime:
        return self.start + timedelta(seconds=seconds)

    # --- jobs -------------------------------------------------------------------------------

    def submit(
        self, spec: JobSpec, priority_class: int, jobs: int, now: float, runtime_hours: float
    ) -> tuple[Queue, bool]:
        """Queue `jobs` equal jobs; returns their TQ and whether it is new."""
        built = self._built.get((requirements_key(spec), priority_class))
        if built is None:  # a stream's jobs all have the same requirements: build and hash them once
            requirements = requirements_of(
                spec.model_copy(update={"priority_class": priority_class}),
                self.settings.jobs,
                self.settings.taskqueues.cpu_buckets,
            )
            built = self._built[(requirements_key(spec), priority_class)] = (requirements, requirements.hash)
        requirements, digest = built
        queue = self._by_hash.get(digest)
        new = queue is None
        if queue is None:
            queue = Queue(len(self.queues) + 1, requirements, digest)
            self.queues[queue.tq_id] = queue
            self._by_hash[digest] = queue
        level = real_priority(spec.user_priority)
        submitter = Submitter(spec.owner, spec.owner_group, spec.charged_account, requirements.vo, runtime_hours)
        queue.levels.setdefault(level, deque()).append([now, jobs, submitter])
        queue.counts[level] = queue.counts.get(level, 0) + jobs
        return queue, new

    def claim(
        self, queue: Queue, level: float, now: float, runtime_of: Callable[[Submitter], float]
    ) -> Submitter | None:
        """Start the oldest job of the level, for `runtime_of` its submitter seconds; None when the
        level is empty (as a claim finds it)."""
        if not queue.counts.get(level):
            return None
        runs = queue.levels[level]
        oldest = runs[0]
        oldest[1] -= 1
        if oldest[1] == 0:
            runs.popleft()
        queue.counts[level] -= 1
        submitter = oldest[2]
        runtime = runtime_of(submitter)
        self._order += 1
        heapq.heappush(self.running, Running(now + runtime, self._order, submitter, runtime))
        key = (submitter.owner_group, submitter.owner)
        self.running_per[key] = self.running_per.get(key, 0) + 1
        return submitter

    def claims_at(self, now: float, runtime_of: Callable[[Submitter], float]) -> WorldClaims:
        """The match's claim port at simulated second `now`."""
        return WorldClaims(self, now, runtime_of)

    def finish_until(self, now: float) -> list[Running]:
        """The running jobs that ended by `now`, charged as Done with their run time in CPU."""
        done = []
        while self.running and self.running[0].ends <= now:
            job = heapq.heappop(self.running)
            key = (job.submitter.owner_group, job.submitter.owner)
            self.running_per[key] -= 1
            self._charge(job.submitter, charge_of(job.seconds, self.settings.accounting), job.ends)
            done.append(job)
        return done

    def _charge(self, who: Submitter, amount: float, seconds: float) -> None:
        row = charge_row(who, amount, self.at(seconds))  # as the service logs it
        charge = Charge(row["charged_at"], row["account"], row["owner"], row["charge"])
        fold(self._usage, [charge], self._parents, self.settings.accounting)
        key = (row["vo"], row["owner_group"], row["owner"])
        times, sums = self._charge_times.setdefault(key, []), self._charged.setdefault(key, [])
        times.append(seconds)
        sums.append((sums[-1] if sums else 0.0) + amount)

    # --- what the service's tables would say ----------------------------------------------------

    def waiting_loads(self) -> list[dict[str, Any]]:
        """LoadDB.waiting_loads' rows: every TQ with waiting jobs and its jobs per level."""
        rows = []
        for q in self.queues.values():
            counts = {p: n for p, n in q.counts.items() if n > 0}
            if not counts:
                continue
            r = q.requirements
            rows.append({
                "id": q.tq_id, "owner": r.owner, "owner_group": r.owner_group, "account": r.account, "vo": r.vo,
                "cpu_time": r.cpu_time, "priority_class": r.priority_class, "job_class": r.job_class,
                **{f: r.amount(f) for f in AMOUNT_FIELDS},
                **{f: list(r.values(f)) for f in MULTI_VALUE_FIELDS}, "levels": counts, **load_of(counts),
                "submitted_at": self.at(q.oldest()),
            })  # fmt: skip
        return rows

    def catalog_row(self, queue: Queue, priority: float, shareless: bool, changed_at: datetime) -> dict[str, Any]:
        """The task_queues row the matcher's catalog reads."""
        r = queue.requirements
        return {"id": queue.tq_id, "requirements_hash": queue.requirements_hash, "changed_at": changed_at,
                "priority": priority, "shareless": shareless, "levels": stored_levels(queue.counts), "owner": r.owner,
                "owner_group": r.owner_group, "vo": r.vo, "cpu_time": r.cpu_time, "priority_class": r.priority_class,
                **{f: r.amount(f) for f in AMOUNT_FIELDS}, **{f: list(r.values(f)) for f in MULTI_VALUE_FIELDS}}  # fmt: skip

    def waiting_per_group(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for q in self.queues.values():
            group = q.requirements.owner_group
            found[group] = found.get(group, 0) + q.waiting
        return found

    def running_per_group(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for (group, _), n in self.running_per.items():
            found[group] = found.get(group, 0) + n
        return found

    def sample(self, seconds: float) -> None:
        """One history sample: the jobs running now per group and per (group, owner)."""
        rows = sample_rows(0, ((g, o, n) for (g, o), n in self.running_per.items()))
        counts = {(r["owner_group"], r["owner"]): r["running"] for r in rows}
        before = len(self._sample_times)
        self._sample_times.append(seconds)
        for key in counts.keys() - self._sampled.keys():
            self._sampled[key] = [0] * before
        for key, sums in self._sampled.items():
            sums.append((sums[-1] if sums else 0) + counts.get(key, 0))


class Inputs:
    """The world as the priority policies read it (fairmatch.services.priorities.PolicyInputs)."""

    def __init__(self, world: World) -> None:
        self.world = world
        # the groups table as the service's start-up fills it from the same settings
        self.groups = {
            name: stored_values(g.job_share, g.properties, g.allow_background_tqs, g.priority)
            for name, g in world.settings.groups.items()
        }

    def sharing_groups(self) -> frozenset[str]:
        return frozenset(name for name, g in self.groups.items() if g["job_sharing"])

    async def group_policies(self) -> dict[str, GroupPolicy]:
        return {name: GroupPolicy(g["job_share"], g["job_sharing"], g["allow_background_tqs"])
                for name, g in self.groups.items()}  # fmt: skip

    async def average_running(self, group: str | None, since: datetime) -> dict[str, float]:
        """Average running jobs over the samples since `since`, per group or per owner of `group`."""
        w = self.world
        first = bisect_left(w._sample_times, (since - w.start).total_seconds())
        samples = len(w._sample_times) - first
        if samples == 0:
            return {}
        averages = {}
        for (g, owner), sums in w._sampled.items():
            if (group is None) != (owner == ""):
                continue  # group level: the group rows; owner level: that group's owners
            if group is not None and g != group:
                continue
            total = sums[-1] - (sums[first - 1] if first else 0)
            averages[g if group is None else owner] = total / samples
        return averages

    async def rank_groups(self) -> dict[str, RankGroup]:
        return {name: RankGroup(job_share=g["job_share"], priority=g["priority"]) for name, g in self.groups.items()}

    async def windowed_usage(self, since: datetime) -> list[WindowedUsage]:
        w = self.world
        cut = (since - w.start).total_seconds()
        found = []
        for key in sorted(w._charged):
            times, sums = w._charge_times[key], w._charged[key]
            first = bisect_left(times, cut)
            total = sums[-1] - (sums[first - 1] if first else 0.0)
            if first < len(times):
                found.append(WindowedUsage(*key, total))
        return found

    async def associations(self) -> list[Association]:
        return self.world.tree

    async def group_shares(self) -> dict[str, float]:
        return {name: g["job_share"] for name, g in self.groups.items()}

    async def usage(self, now: datetime) -> dict[Node, float]:
        return current_usage(self.world._usage, now, self.world.settings.accounting)

    async def group_levels(self) -> dict[str, int]:
        return {name: g["priority"] for name, g in self.groups.items()}

    async def class_priorities(self) -> dict[str, int]:
        return {name: c.priority for name, c in self.world.classes.items()}


@dataclass(frozen=True, slots=True)
class WorldClaims:
    """The world as the match's claim port (`fairmatch.matching.matcher.Claims`): a claim
    starts the oldest job of the level. The world has no site limits, named jobs or
    request ids, and the simulated pilots never ask for them."""

    world: World
    now: float
    runtime_of: Callable[[Submitter], float]

    async def claim(self, target: ClaimTarget) -> Outcome:
        if target.job_id is not None or target.limits is not None:
            raise ValueError("the simulated world claims by level only")
        queue = self.world.queues[target.tq_id]
        submitter = self.world.claim(queue, target.level, self.now, self.runtime_of)
        if submitter is None:
            return Missed(level_empty=True)  # the catalog's level count was an upper bound
        return Claimed(job=submitter, tq_now_empty=queue.waiting == 0)
