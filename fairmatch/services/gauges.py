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
from fairmatch.db.priorities import PriorityDB
from fairmatch.errors import DatabaseError
from fairmatch.priority.groups import target_shares

log = logging.getLogger("fairmatch.metrics")


@dataclass
class Snapshot:
    waiting: dict[str, int] = field(default_factory=dict)  # per owner_group
    running: dict[str, int] = field(default_factory=dict)  # Matched + Running, per owner_group
    target_share: dict[str, float] = field(default_factory=dict)
    task_queues: int = 0
    jobs_by_status: dict[str, int] = field(default_factory=dict)
    corrections: dict[tuple[str, str], float] = field(default_factory=dict)  # (instance, entity)
    database_up: bool = False


async def read_snapshot(engine: AsyncEngine) -> Snapshot:
    """The shared state, read in one transaction of its own."""
    async with engine.connect() as conn, read_transaction(conn):
        db = PriorityDB.of(conn)
        waiting = await db.waiting_per_group()
        running = await db.running_per_group()
        by_status = await db.jobs_per_status()
        tq_count = await db.task_queue_count()
        shares = await db.group_shares()
        report = await db.latest_report()
    return Snapshot(
        waiting=waiting,
        running=running,
        target_share=target_shares(shares, set(waiting) | set(running)),
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
        yield _labelled("fairmatch_waiting_jobs", "Waiting jobs per group.", "owner_group", s.waiting)
        yield _labelled(
            "fairmatch_running_jobs", "Jobs holding a slot (Matched or Running) per group.", "owner_group", s.running
        )
        yield _labelled(
            "fairmatch_group_target_share",
            "Configured share of each group with waiting or running jobs, normalised to 1.",
            "owner_group",
            s.target_share,
        )
        tqs = GaugeMetricFamily("fairmatch_task_queues", "Task queues (with waiting jobs or not yet swept).")
        tqs.add_metric([], s.task_queues)
        yield tqs
        yield _labelled("fairmatch_jobs_total", "Jobs per status.", "status", s.jobs_by_status)
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


def _labelled(name: str, documentation: str, label: str, values: Mapping[str, float]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=[label])
    for key, value in sorted(values.items()):
        family.add_metric([key], value)
    return family
