"""POST /jobs/{kill,hold,release,reschedule,priority}: one action on many jobs.

Users act on their own jobs only; operators and admins on every job. The selection
is the listing's filters or job ids (fairmatch.jobs.filters.JobSelection); how the
jobs are changed, a batch at a time, is fairmatch.services.bulk's.
"""

from __future__ import annotations

from functools import partial

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from fairmatch.api.deps import Connection, CurrentSettings, Submitters
from fairmatch.auth import policy
from fairmatch.auth.tokens import Principal
from fairmatch.fields import Name
from fairmatch.jobs import priority_classes
from fairmatch.jobs.classes import PriorityChange
from fairmatch.jobs.filters import JobSelection
from fairmatch.services import bulk
from fairmatch.settings import Settings

router = APIRouter(prefix="/jobs", tags=["jobs in bulk"])


class BulkRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    filter: JobSelection = Field(description="Which jobs: the listing's filters, and/or `job_ids`.")
    dry_run: bool = Field(False, description="Only count and list the jobs the action would change.")
    reason: Name | None = Field(
        None,
        description="Why (one line): the minor status of the jobs changed and of their history's event "
        "(a priority change: in the audit log only), and in the audit log.",
    )


class BulkPriorityRequest(BulkRequest):
    change: PriorityChange = Field(description="The new user priority and/or priority class.")


class BulkResult(BaseModel):
    matched: int = Field(description="Jobs the selection names (within what the caller may act on).")
    changed: int = Field(description="Jobs the action changed (a dry run: would change); the others were left.")
    job_ids: list[int] = Field(description=f"The first {bulk.LISTED} jobs changed, in id order.")


async def _act(
    action: bulk.BulkAction, body: BulkRequest, caller: Principal, conn: Connection, settings: Settings, **more
) -> dict:
    request = bulk.Request(
        action=action, selection=bulk.Selection(body.filter, body.filter.job_ids), by=caller.sub,
        scope=policy.job_scope(caller), dry_run=body.dry_run, reason=body.reason, **more,
    )  # fmt: skip
    return await bulk.act(conn, request, settings)


@router.post("/kill", response_model=BulkResult, summary="Kill every selected job that has not finished")
async def kill_jobs(body: BulkRequest, caller: Submitters, conn: Connection, settings: CurrentSettings) -> dict:
    """`scancel -u`, `condor_rm -constraint`: the waiting ones leave their task queues at once."""
    return await _act(bulk.BulkAction.kill, body, caller, conn, settings)


@router.post("/hold", response_model=BulkResult, summary="Hold every selected waiting job")
async def hold_jobs(body: BulkRequest, caller: Submitters, conn: Connection, settings: CurrentSettings) -> dict:
    """`condor_hold`, `scontrol hold`: a Held job is never matched; it keeps its id, its user
    priority and so its place, until it is released. Only Waiting jobs are held."""
    return await _act(bulk.BulkAction.hold, body, caller, conn, settings)


@router.post("/release", response_model=BulkResult, summary="Release every selected held job")
async def release_jobs(body: BulkRequest, caller: Submitters, conn: Connection, settings: CurrentSettings) -> dict:
    """Held -> Waiting, back in its task queue (made again if it went meanwhile) at the place
    its id gives it."""
    return await _act(bulk.BulkAction.release, body, caller, conn, settings)


@router.post(
    "/reschedule", response_model=BulkResult, summary="Put every selected Matched or Stalled job back in its queue"
)
async def reschedule_jobs(body: BulkRequest, caller: Submitters, conn: Connection, settings: CurrentSettings) -> dict:
    """As `POST /jobs/{id}/reschedule` for each: not counted in the jobs' reschedules."""
    return await _act(bulk.BulkAction.reschedule, body, caller, conn, settings)


@router.post("/priority", response_model=BulkResult, summary="Change the priority of every selected unfinished job")
async def reprioritise_jobs(
    body: BulkPriorityRequest, caller: Submitters, conn: Connection, settings: CurrentSettings
) -> dict:
    """As `PATCH /jobs/{id}` for each: users may only lower the priority class of their own
    jobs; a Waiting job moves to the task queue of its new class at once."""
    check_class = partial(priority_classes.check_class_change, caller, requested=body.change.priority_class)
    return await _act(bulk.BulkAction.priority, body, caller, conn, settings, change=body.change,
                      check_class=check_class)  # fmt: skip
