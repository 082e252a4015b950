"""/match and /taskqueues: what pilots and operators ask of the queues."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request, Response

from fairmatch.api.deps import (
    Connection,
    CurrentSettings,
    Operators,
    Pilots,
    PilotsAndOperators,
    Reading,
    Submitters,
    ThisProcess,
    connection,
    process_of,
)
from fairmatch.api.schemas import Job, MatchingTaskQueueList, TaskQueue, TaskQueueList
from fairmatch.auth import policy
from fairmatch.auth.tokens import Principal
from fairmatch.db.taskqueues import TaskQueueDB
from fairmatch.errors import NotFound
from fairmatch.matching.pinning import pin_resource
from fairmatch.matching.resource import ClaimingResource, DryRunResource
from fairmatch.services import matching as service
from fairmatch.services import taskqueues

router = APIRouter(tags=["matching"])


@router.post(
    "/match",
    response_model=Job,
    responses={
        204: {"description": "No job is eligible for this resource."},
        409: {
            "description": "The `request_id` was first sent with other matching fields: the problem names"
            " the first request's site (`first_site`) and the fields that differ (`differing_fields`)."
        },
    },
    summary="Claim the job this resource should run now",
)
async def match(resource: ClaimingResource, caller: Pilots, request: Request) -> Response:
    resource = pin_resource(caller, resource)
    process = process_of(request)
    async with connection(request) as conn:
        job = await service.match(
            conn, resource, request.app.state.settings, process.rng, requester=caller.sub, process=process
        )
    if job is None:
        return Response(status_code=204)
    # the job was validated as it was read: encoded by its model, not validated a second time
    return Response(job.model_dump_json(), media_type="application/json")


@router.post(
    "/taskqueues/matching",
    response_model=MatchingTaskQueueList,
    summary="Dry run: the TQs this resource may match, with their chances",
)
async def matching_task_queues(
    resource: DryRunResource,
    caller: PilotsAndOperators,
    conn: Connection,
    settings: CurrentSettings,
    process: ThisProcess,
) -> dict:
    resource = pin_resource(caller, resource)
    return await service.explain(conn, resource, settings, process.keeper, include_empty=resource.include_empty)


def _visible_task_queues(caller: Principal, tqs: list[TaskQueue]) -> list[TaskQueue]:
    """The queues of `tqs` the caller sees (users: those of their own jobs)."""
    restrictions = policy.queue_restrictions(caller)
    return [tq for tq in tqs if policy.sees_queue(restrictions, tq)]


@router.get("/taskqueues", response_model=TaskQueueList, summary="All task queues")
async def list_task_queues(caller: Submitters, conn: Reading) -> dict:
    tqs = await TaskQueueDB.of(conn).read()
    return {"task_queues": _visible_task_queues(caller, tqs)}


TaskQueueId = Annotated[int, Path(ge=1, le=2**63 - 1, description="The task queue's id.")]


@router.delete(
    "/taskqueues/{tq_id}",
    status_code=204,
    responses={
        404: {"description": "No such task queue.",
              "content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}},
        409: {"description": "The queue still holds waiting jobs.",
              "content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}},
    },
    summary="Delete an empty task queue now (operator)",
)  # fmt: skip
async def delete_task_queue(tq_id: TaskQueueId, caller: Operators, conn: Connection) -> Response:
    """As DIRAC's `deleteTaskQueueIfEmpty`. Empty queues are otherwise deleted by the
    background sweep once unchanged for a while; a queue holding jobs stays (409)."""
    await taskqueues.delete_task_queue(conn, tq_id, by=caller.sub)
    return Response(status_code=204)


@router.get("/taskqueues/{tq_id}", response_model=TaskQueue, summary="One task queue")
async def get_task_queue(
    tq_id: Annotated[int, Path(ge=1, le=2**63 - 1)], caller: Submitters, conn: Reading
) -> TaskQueue:
    found = _visible_task_queues(caller, await TaskQueueDB.of(conn).read([tq_id]))
    if not found:
        raise NotFound(f"task queue {tq_id} does not exist (queues left empty are deleted by the sweep)")
    return found[0]
