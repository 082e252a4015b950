"""/priorities and /shares: run the priority loop now, and explain its last decision."""

from __future__ import annotations

from fastapi import APIRouter, Request

from app.api.deps import Caller, Connection, CurrentSettings
from app.api.schemas import PriorityRun, RecomputeResult
from app.auth import policy
from app.auth.tokens import Role
from app.background import runner_name
from app.db.engine import read_transaction
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
