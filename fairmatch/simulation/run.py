"""The simulated clock: arrivals, the priority loop, the history sampler, pilots asking for jobs.

Every decision is the service's code: the priorities come from
`fairmatch.services.priorities.decide` (the policies, share corrections and their
history), and a free slot's job from the matching catalog, eligibility and
lottery (`fairmatch.matching`), with the claim's outcomes the catalog learns from
(an empty level or queue is drained until its row changes). What is
simulated is only what the database and the pilots would do: hold the jobs,
run them for their run time, report them Done with their run time in CPU.

Like the service, a new task queue gets its priorities at once (here from a
full priority run), and claims do not update the catalog's level counts:
they are refreshed by arrivals and by each priority run.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from fairmatch.jobs.classes import JobClass
from fairmatch.jobs.priority_classes import requested_class, resolve_priority_class
from fairmatch.limits.rules import SiteLimits
from fairmatch.matching.catalog import Catalog
from fairmatch.matching.matcher import Matcher, match
from fairmatch.matching.resource import ResourceDescription
from fairmatch.priority import rank
from fairmatch.priority.groups import target_shares
from fairmatch.services.priorities import configured_corrections, decide
from fairmatch.settings import Settings
from fairmatch.simulation.scenario import Scenario, Stream
from fairmatch.simulation.world import Inputs, Queue, Submitter, World

# a Monday at midnight: the reset periods (daily, weekly, monthly) start on the clock's boundaries
START = datetime(2026, 1, 5, tzinfo=UTC)
SECONDS_PER_HOUR = 3600.0


@dataclass(slots=True)
class Hour:
    """One simulated hour of one group."""

    hour: int
    group: str
    running: int
    waiting: int
    target_share: float
    achieved_share: float
    correction: float


@dataclass(slots=True)
class Totals:
    started: int = 0
    done: int = 0
    slot_seconds: float = 0.0
    slot_seconds_last_24h: float = 0.0
    target_sum: float = 0.0  # target share summed over the hours any group waited


@dataclass(slots=True)
class Result:
    hours: float
    wall_seconds: float
    matches: int
    priority_runs: int = 0
    timeline: list[Hour] = field(default_factory=list)
    groups: dict[str, Totals] = field(default_factory=dict)
    corrections_on: bool = False
    policy: str = "dirac"
    lottery: str = "exact"

    def summary(self) -> dict[str, Any]:
        occupied = sum(t.slot_seconds for t in self.groups.values()) or 1.0
        occupied_24h = sum(t.slot_seconds_last_24h for t in self.groups.values()) or 1.0
        waited_hours = len({h.hour for h in self.timeline if h.target_share > 0}) or 1
        return {
            "simulated_hours": self.hours,
            "wall_seconds": round(self.wall_seconds, 3),
            "matches": self.matches,
            "priority_runs": self.priority_runs,
            "policy": self.policy,
            "lottery": self.lottery,
            "groups": {
                group: {
                    "target_share": t.target_sum / waited_hours,
                    "achieved_share": t.slot_seconds / occupied,
                    "achieved_share_last_24h": t.slot_seconds_last_24h / occupied_24h,
                    "jobs_started": t.started,
                    "jobs_done": t.done,
                    "slot_hours": t.slot_seconds / SECONDS_PER_HOUR,
                }
                for group, t in sorted(self.groups.items())
            },
        }


class _Current:
    """The simulator's surroundings: its catalog is always current, and it has no site limits."""

    async def fresher_catalog(self, *, must: bool) -> Catalog | None:
        return None

    async def site_limits(self) -> SiteLimits | None:
        return None


_CURRENT = _Current()


class Simulation:
    def __init__(
        self, scenario: Scenario, settings: Settings, classes: dict[str, JobClass], *, seed: int | None = None
    ) -> None:
        self.scenario, self.settings, self.clock = scenario, settings, scenario.simulation
        seed = self.clock.seed if seed is None else seed
        self.rng = random.Random(seed)  # the lottery's, as the service's matcher holds one
        self.random = np.random.default_rng(seed)  # arrivals and run times
        self.world = World(settings, classes, START, scenario.association_rows())
        self.inputs = Inputs(self.world)
        self.catalog = Catalog()
        self.catalog.sharing_groups = self.inputs.sharing_groups()
        self.corrections = configured_corrections(settings.priority)
        self.group_shares = {name: g["job_share"] for name, g in self.inputs.groups.items()}
        self.priorities: dict[int, float] = {}
        self.shareless: set[int] = set()  # the TQs the last run put in rank's lower band
        self.group_corrections: dict[str, float] = {}
        self._changes = 0
        self.matching = settings.effective_matching
        self.query = ResourceDescription(
            site=self.clock.site, cpu_time=self.clock.cpu_time, platform=self.clock.platform,
            job_type=self.clock.job_type, tags=self.clock.tags, max_ram_mb=self.clock.max_ram_mb,
        ).to_query(self.matching)  # fmt: skip
        self._classes = {i: self._priority_class(s) for i, s in enumerate(scenario.streams)}

    def _priority_class(self, stream: Stream) -> int:
        """As an operator's submission settles it: the class asked for, or the job class's default."""
        job_class = self.world.classes.get(stream.job.job_class) if stream.job.job_class is not None else None
        return resolve_priority_class(True, requested_class(stream.job), job_class)

    # --- what the service's database and loops do ------------------------------------------------

    def _changed_at(self, seconds: float) -> datetime:
        """A row's changed_at: the clock, made strictly later than any before it."""
        self._changes += 1
        return self.world.at(seconds) + timedelta(microseconds=self._changes)

    def _publish(self, queues: list[Queue], seconds: float) -> None:
        """The rows these TQs have now, as the keeper reads them into the catalog."""
        stamp = self._changed_at(seconds)
        self.catalog.apply(
            self.world.catalog_row(q, self.priorities.get(q.tq_id, 0.0), q.tq_id in self.shareless, stamp)
            for q in queues
        )

    async def _priority_run(self, seconds: float) -> None:
        rows = self.world.waiting_loads()
        if not rows:
            return
        outcome = await decide(self.inputs, self.settings, self.corrections, rows, self.world.at(seconds))
        self.priorities = outcome.priorities
        self.shareless = {tq_id for tq_id, origin in outcome.origins.items() if rank.shareless(origin)}
        self.group_corrections = {e["group"]: e["group_correction"] for e in outcome.report.get("entities", [])}
        self._publish([self.world.queues[r["id"]] for r in rows], seconds)

    def _arrive(self, stream_index: int, jobs: int, seconds: float) -> bool:
        """Queue a stream's jobs; True when they made a new TQ."""
        stream = self.scenario.streams[stream_index]
        queue, new = self.world.submit(stream.job, self._classes[stream_index], jobs, seconds, stream.runtime_hours)
        self._publish([queue], seconds)
        return new

    def _arrivals(self, stream: Stream, seconds: float, step: float) -> int:
        """The stream's jobs arriving in [seconds, seconds + step): its backlog at its start,
        then Poisson arrivals."""
        begins = stream.start_hour * SECONDS_PER_HOUR
        if seconds + step <= begins:
            return 0
        jobs = stream.backlog if seconds <= begins else 0
        if stream.per_hour:
            jobs += int(self.random.poisson(stream.per_hour * min(step, seconds + step - begins) / SECONDS_PER_HOUR))
        return jobs

    def _runtime(self, submitter: Submitter) -> float:
        return float(self.random.exponential(submitter.runtime_hours * SECONDS_PER_HOUR))

    async def _match(self, seconds: float) -> str | None:
        """One free slot asks for a job: the group it starts, or None when nothing is eligible.
        The service's match loop, with the world as its claims."""
        matcher = Matcher(self.catalog, self.query, self.matching, self.rng)
        claimed = await match(matcher, self.world.claims_at(seconds, self._runtime), _CURRENT)
        return None if claimed is None else claimed.job.owner_group

    # --- the clock -------------------------------------------------------------------------------

    def run(self, progress: Callable[[float], None] | None = None) -> Result:
        """Simulate; `progress(hours done)` is called once per simulated hour."""
        return asyncio.run(self._run(progress))

    async def _run(self, progress: Callable[[float], None] | None) -> Result:
        started = time.perf_counter()
        clock, priority = self.clock, self.settings.priority
        step, end = clock.step_seconds, clock.hours * SECONDS_PER_HOUR
        streams = self.scenario.streams
        result = Result(clock.hours, 0.0, 0, corrections_on=priority.corrections_enabled,
                        policy=priority.policy, lottery=self.matching.lottery.value)  # fmt: skip
        totals = result.groups
        for s in streams:
            totals.setdefault(s.job.owner_group, Totals())
        next_priority = next_sample = 0.0
        used_this_hour: dict[str, float] = {}
        seconds = 0.0
        while seconds < end:
            for job in self.world.finish_until(seconds):
                totals[job.submitter.owner_group].done += 1
            new_queue = False
            for i, s in enumerate(streams):
                jobs = self._arrivals(s, seconds, step)
                if jobs:
                    new_queue |= self._arrive(i, jobs, seconds)
            if seconds >= next_sample:
                self.world.sample(seconds)
                while next_sample <= seconds:  # a clock coarser than the interval samples once a tick
                    next_sample += priority.sample_seconds
            if seconds >= next_priority or new_queue:
                await self._priority_run(seconds)
                result.priority_runs += 1
                while next_priority <= seconds:
                    next_priority += priority.interval_seconds
            for _ in range(clock.slots - len(self.world.running)):
                group = await self._match(seconds)
                if group is None:
                    break  # the slots are alike: what one cannot get, none can
                totals[group].started += 1
                result.matches += 1
            span = min(step, end - seconds)
            last_day = seconds >= end - 24 * SECONDS_PER_HOUR
            for group, n in self.world.running_per_group().items():
                totals[group].slot_seconds += n * span
                if last_day:
                    totals[group].slot_seconds_last_24h += n * span
                used_this_hour[group] = used_this_hour.get(group, 0.0) + n * span
            hour = int(seconds // SECONDS_PER_HOUR)
            seconds += step
            if seconds >= end or int(seconds // SECONDS_PER_HOUR) != hour:
                self._close_hour(result, hour, used_this_hour)
                used_this_hour = {}
                if progress is not None:
                    progress(min(seconds, end) / SECONDS_PER_HOUR)
        result.wall_seconds = time.perf_counter() - started
        return result

    def _close_hour(self, result: Result, hour: int, used: dict[str, float]) -> None:
        """The timeline's rows of one hour: the state at its end, the shares over it."""
        waiting = self.world.waiting_per_group()
        running = self.world.running_per_group()
        targets = target_shares(self.group_shares, {g for g, n in waiting.items() if n > 0})
        occupied = sum(used.values())
        for group in sorted(result.groups):
            target = targets.get(group, 0.0)
            result.groups[group].target_sum += target
            result.timeline.append(Hour(
                hour=hour, group=group, running=running.get(group, 0), waiting=waiting.get(group, 0),
                target_share=target, achieved_share=used.get(group, 0.0) / occupied if occupied else 0.0,
                correction=self.group_corrections.get(group, 1.0),
            ))  # fmt: skip
