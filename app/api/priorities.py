"""/priorities and /shares: run the priority loop now, and explain its last decision."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from sqlalchemy import select

from app.api.deps import Caller, Connection, CurrentSettings
from app.api.schemas import Priorities, PriorityRun, RecomputeResult
from app.auth import policy
from app.auth.tokens import Role
from app.background import runner_name
from app.db.engine import read_transaction
from app.db.tables import task_queues, tq_jobs
from app.priority import service

router = APIRouter(tags=["priorities"])


@router.post("/priorities/recompute", response_model=RecomputeResult, summary="Recompute all priorities now")
async def recompute(request: Request, conn: Connection, settings: CurrentSettings, caller: Caller) -> dict:
    """Runs the priority loop once (waiting for a run in progress) and returns when it is done."""
    policy.require(caller, Role.admin)
    return await service.recompute(
        conn, settings, request.app.state.corrections, runner=runner_name(), scheduled=False
    )


@router.get("/shares", response_model=PriorityRun, summary="Entities, shares, usage and corrections")
async def shares(request: Request, conn: Connection, settings: CurrentSettings, caller: Caller) -> dict:
    """The last priority run's decision (sshare): one run is made first if there was none."""
    policy.require(caller, Role.admin, Role.operator)
    async with read_transaction(conn):
        last = await service.latest_run(conn)
    if last is None:
        return await service.recompute(
            conn, settings, request.app.state.corrections, runner=runner_name(), scheduled=False
        )
    return {**{k: v for k, v in last.items() if k != "report"}, **last["report"]}


@router.get("/priorities", response_model=Priorities, summary="Why each TQ and job has its priority (sprio)")
async def priorities(
    conn: Connection,
    settings: CurrentSettings,
    caller: Caller,
    task_queue_id: Annotated[int | None, Query(ge=1, le=2**63 - 1)] = None,
    jobs_limit: Annotated[int, Query(ge=0, le=10_000)] = 100,
) -> dict:
    """Every TQ's priority class, priority and its terms or factors; then waiting jobs
    (lowest ids first) with their user priority and the TQ values they inherit."""
    policy.require(caller, Role.admin, Role.operator, Role.user)
    tq = task_queues
    stmt = select(tq.c.id, tq.c.owner, tq.c.owner_group, tq.c.priority_class, tq.c.priority, tq.c.priority_origin)
    if task_queue_id is not None:
        stmt = stmt.where(tq.c.id == task_queue_id)
    if not caller.privileged:
        scope = policy.job_scope(caller)
        stmt = stmt.where(tq.c.owner == scope.owner, tq.c.owner_group.in_(sorted(scope.owner_groups)))
    async with read_transaction(conn):
        queues = {row.id: row for row in await conn.execute(stmt.order_by(tq.c.id))}
        waiting = (
            await conn.execute(
                select(tq_jobs).where(tq_jobs.c.tq_id.in_(list(queues))).order_by(tq_jobs.c.job_id).limit(jobs_limit)
            )
        ).all() if queues and jobs_limit else []  # fmt: skip
    return {
        "policy": settings.priority.policy,
        "lottery": settings.matching.lottery.value,
        "task_queues": [
            {"task_queue_id": q.id, "owner": q.owner, "owner_group": q.owner_group,
             "priority_class": q.priority_class, "priority": q.priority, "origin": q.priority_origin}
            for q in queues.values()
        ],
        "jobs": [
            {"job_id": j.job_id, "task_queue_id": j.tq_id, "user_priority": j.user_priority,
             "real_priority": j.real_priority, "priority_class": queues[j.tq_id].priority_class,
             "task_queue_priority": queues[j.tq_id].priority}
            for j in waiting
        ],
    }  # fmt: skip
