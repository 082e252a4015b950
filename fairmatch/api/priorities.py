"""/priorities and /shares: run the priority loop now, and explain its last decision."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from fairmatch.api.deps import Admin, Connection, CurrentSettings, Operators, Submitters
from fairmatch.api.schemas import Priorities, PriorityRun, RecomputeResult
from fairmatch.auth import policy
from fairmatch.services import priorities as service
from fairmatch.services.background import runner_name

router = APIRouter(tags=["priorities"])


@router.post("/priorities/recompute", response_model=RecomputeResult, summary="Recompute all priorities now")
async def recompute(request: Request, caller: Admin, conn: Connection, settings: CurrentSettings) -> dict:
    """Runs the priority loop once (waiting for a run in progress) and returns when it is done."""
    return await service.recompute_now(
        conn, settings, request.app.state.corrections, runner=runner_name(), by=caller.sub
    )


@router.get("/shares", response_model=PriorityRun, summary="Entities, shares, usage and corrections")
async def shares(request: Request, caller: Operators, conn: Connection, settings: CurrentSettings) -> dict:
    """The last priority run's decision (sshare): one run is made first if there was none."""
    return await service.shares(conn, settings, request.app.state.corrections, runner=runner_name())


@router.get("/priorities", response_model=Priorities, summary="Why each TQ and job has its priority (sprio)")
async def priorities(
    caller: Submitters,
    conn: Connection,
    settings: CurrentSettings,
    task_queue_id: Annotated[int | None, Query(ge=1, le=2**63 - 1)] = None,
    jobs_limit: Annotated[int, Query(ge=0, le=10_000)] = 100,
) -> dict:
    """Every TQ's priority class, priority and its terms or factors; then waiting jobs
    (lowest ids first) with their user priority and the TQ values they inherit."""
    return await service.explain_priorities(
        conn, settings, policy.job_scope(caller), task_queue_id=task_queue_id, jobs_limit=jobs_limit
    )
