"""Gauges read from the database when Prometheus scrapes, cached a few seconds.

They describe the shared state (every replica exports the same values, which
dashboards fold with `max`), so they are computed at scrape time and never
per request; a cache keeps many scrapers from costing more than one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy.ext.asyncio import AsyncEngine

from fairmatch.db.engine import read_transaction
from fairmatch.db.gauges import GaugeDB
from fairmatch.db.groups import GroupDB
from fairmatch.db.priority_runs import PriorityRunDB
from fairmatch.errors import DatabaseError
from fairmatch.jobs.lifecycle import JobStatus
from fairmatch.priority.groups import target_shares

log = logging.getLogger("fairmatch.metrics")

# the statuses `fairmatch_group_jobs` tells apart: in a task queue, handed to a pilot, started
GROUP_STATUSES = (JobStatus.Waiting, JobStatus.Matched, JobStatus.Running)


@dataclass
class Snapshot:
    group_jobs: dict[tuple[str, str], int] = field(default_factory=dict)  # (owner_group, a GROUP_STATUSES status)
    target_share: dict[str, float] = field(default_factory=dict)
    task_queues: int = 0
    jobs_by_status: dict[str, int] = field(default_factory=dict)
    corrections: dict[tuple[str, str], float] = field(default_factory=dict)  # (instance, entity)
    database_up: bool = False


async def read_snapshot(engine: AsyncEngine) -> Snapshot:
    """The shared state, read in one transaction of its own."""
    async with engine.connect() as conn, read_transaction(conn):
        db = GaugeDB.of(conn)
        waiting = await db.waiting_per_group()
        holding = await db.holding_per_group_and_status()
        by_status = await db.jobs_per_status()
        tq_count = await db.task_queue_count()
        shares = await GroupDB.of(conn).group_shares()
        report = await PriorityRunDB.of(conn).latest_report()
    group_jobs = {**{(group, JobStatus.Waiting.value): n for group, n in waiting.items()}, **holding}
    return Snapshot(
        group_jobs=group_jobs,
        target_share=target_shares(shares, {group for group, _ in group_jobs}),
        task_queues=tq_count,
        jobs_by_status=by_status,
        corrections=corrections_of(report),
        database_up=True,
    )


def corrections_of(report: dict | None) -> dict[tuple[str, str], float]:
    """The correction factor of every entity of every corrector instance in a run report."""
    found: dict[tuple[str, str], float] = {}
    for instance, explained in ((report or {}).get("corrections") or {}).items():
        for entity, detail in (explained.get("entities") or {}).items():
            found[(instance, entity)] = float(detail["correction"])
    return found


class DatabaseGauges(Collector):
    """Keeps the last snapshot; `refresh` re-reads it when older than `max_age`."""

    def __init__(self, max_age_seconds: float) -> None:
        self.max_age = max_age_seconds
        self.snapshot = Snapshot()
        self.taken_at = float("-inf")
        self._lock = asyncio.Lock()

    async def refresh(self, engine: AsyncEngine) -> None:
        if time.monotonic() - self.taken_at < self.max_age:
            return
        async with self._lock:  # concurrent scrapes share one read
            if time.monotonic() - self.taken_at < self.max_age:
                return
            try:
                self.snapshot = await read_snapshot(engine)
            except DatabaseError as exc:
                log.warning("database gauges not refreshed: %s", exc.cause)
                self.snapshot = Snapshot()
            self.taken_at = time.monotonic()

    def collect(self):
        s = self.snapshot
        up = GaugeMetricFamily("fairmatch_database_up", "1 when the last gauge read reached the database.")
        up.add_metric([], 1.0 if s.database_up else 0.0)
        yield up
        if not s.database_up:
            return
        yield group_jobs(s.group_jobs)
        yield _labelled(
            "fairmatch_group_target_share",
            "Configured share of each group with waiting, matched or running jobs, normalised to 1.",
            "owner_group",
            s.target_share,
        )
        tqs = GaugeMetricFamily("fairmatch_task_queues", "Task queues (with waiting jobs or not yet swept).")
        tqs.add_metric([], s.task_queues)
        yield tqs
        yield _labelled(
            "fairmatch_jobs", "Jobs in the database per status, final ones until purged.", "status", s.jobs_by_status
        )
        corrections = GaugeMetricFamily(
            "fairmatch_share_correction",
            "Share correction factor of the last priority run, per corrector instance and entity.",
            labels=["instance", "entity"],
        )
        for (instance, entity), value in sorted(s.corrections.items()):
            corrections.add_metric([instance, entity], value)
        yield corrections

    def exposition(self) -> bytes:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        return generate_latest(registry)


def group_jobs(counts: Mapping[tuple[str, str], int]) -> GaugeMetricFamily:
    """Every group with jobs in any of GROUP_STATUSES gets a series for each, zeros included:
    its series do not vanish when one count drops to zero, and summing some statuses by
    group (the slots it holds: Matched and Running) keeps every group."""
    family = GaugeMetricFamily(
        "fairmatch_group_jobs",
        "Jobs per group and status: Waiting (in a task queue), Matched (handed to a pilot, not yet "
        "reported started) and Running. The slots a group holds are its Matched plus Running.",
        labels=["owner_group", "status"],
    )
    for group in sorted({group for group, _ in counts}):
        for status in GROUP_STATUSES:
            family.add_metric([group, status.value], counts.get((group, status.value), 0))
    return family


def _labelled(name: str, documentation: str, label: str, values: Mapping[str, float]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=[label])
    for key, value in sorted(values.items()):
        family.add_metric([key], value)
    return family
