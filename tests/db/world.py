"""One fairmatch process driven in process: the services the routes call, on one connection.

What a test would do over HTTP (create groups, submit, recompute, match, report a
status) it does here through the same service functions, with a seeded generator
for the lottery so that a statistical case is reproducible.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from fairmatch.db.engine import read_transaction
from fairmatch.db.taskqueues import TaskQueueDB
from fairmatch.jobs.models import JobSpec, StatusUpdate
from fairmatch.matching.resource import ClaimingResource, ResourceDescription
from fairmatch.priority.groups import GroupUpdate
from fairmatch.services import groups, history, jobs, matching, priorities, submission
from fairmatch.services.process import Process
from fairmatch.settings import Settings


class World:
    def __init__(self, conn: AsyncConnection, settings: Settings, seed: int) -> None:
        self.conn = conn
        self.settings = settings
        self.rng = random.Random(seed)
        self.process = Process(conn.engine, matching=settings.matching)
        self.corrections = priorities.configured_corrections(settings.priority)

    async def put_group(self, name: str, job_share: float, properties: Iterable[str] = ()) -> None:
        await groups.put_group(self.conn, name, GroupUpdate(job_share=job_share, properties=list(properties)))

    async def submit(self, specs: list[dict[str, Any]]) -> list[int]:
        """Queue jobs as the API does after its checks (which settle the priority class)."""
        queued = await submission.submit(
            self.conn, [JobSpec(priority_class=0, **s) for s in specs], self.settings, by="alice"
        )
        return [q["job_id"] for q in queued]

    async def recompute(self) -> dict[str, Any]:
        return await priorities.recompute(self.conn, self.settings, self.corrections, runner="test", scheduled=False)

    async def sample(self, now: datetime) -> bool:
        """One history sample of the running jobs, taken at `now`."""
        p = self.settings.priority
        return await history.sample(
            self.conn, now, p.sample_seconds, keep_seconds=3600, reported_seconds=p.reported_running_seconds
        )

    async def shares(self) -> dict[str, Any]:
        return await priorities.shares(self.conn, self.settings, self.corrections, runner="test")

    async def task_queues(self) -> list[dict[str, Any]]:
        async with read_transaction(self.conn):
            return [tq.model_dump() for tq in await TaskQueueDB.of(self.conn).read()]

    async def match(self, resource: dict[str, Any]) -> dict[str, Any] | None:
        described = ClaimingResource(**resource)
        job = await matching.match(self.conn, described, self.settings, self.rng, "pilot", self.process)
        return None if job is None else job.model_dump()

    async def probabilities(self, resource: dict[str, Any]) -> list[dict[str, Any]]:
        """The dry run's list: every eligible TQ with the probability a match draws it."""
        explained = await matching.explain(
            self.conn, ResourceDescription(**resource), self.settings, self.process.keeper
        )
        return explained["task_queues"]

    async def set_status(self, job_id: int, status: str) -> dict[str, Any]:
        job = await jobs.report_status(self.conn, job_id, StatusUpdate(status=status), self.settings, by="pilot")
        return job.model_dump()
