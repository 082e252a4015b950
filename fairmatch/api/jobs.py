"""/jobs: submit, read, list, change priorities, report status, kill."""

from __future__ import annotations

import base64
import binascii
from datetime import timedelta
from functools import partial
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response

from fairmatch.api.deps import Admin, AnyRole, Connection, CurrentSettings, PilotsAndOperators, Submitters, connection
from fairmatch.api.schemas import Job, JobHistory, JobPage, PurgeResult, SubmitResponse
from fairmatch.auth import policy
from fairmatch.clock import utcnow
from fairmatch.errors import BadRequest, InvalidInput
from fairmatch.fields import Name
from fairmatch.jobs import priority_classes
from fairmatch.jobs.classes import PriorityChange
from fairmatch.jobs.filters import MAX_ID, JobOrder, JobQuery
from fairmatch.jobs.models import PurgeRequest, StatusUpdate, SubmitRequest
from fairmatch.metrics import SUBMITTED_JOBS
from fairmatch.services import audit, job_classes, jobs, reprioritise, retention, submission
from fairmatch.services.background import runner_name
from fairmatch.settings import Settings

router = APIRouter(prefix="/jobs", tags=["jobs"])
# the status reports apart, so that the application can route them before the rest
reports = APIRouter(prefix="/jobs", tags=["jobs"])

JobId = Annotated[int, Path(ge=1, le=MAX_ID, description="The job's id.")]
ExternalId = Annotated[Name, Path(description="The submitter's own id for the job (`external_id`).")]


# a cursor names the last job of its page and the order it continues: ids after it, or before it
CURSOR_PREFIXES = {JobOrder.oldest: "after", JobOrder.newest: "before"}


def encode_cursor(last_id: int, order: JobOrder = JobOrder.oldest) -> str:
    return base64.urlsafe_b64encode(f"{CURSOR_PREFIXES[order]}:{last_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str, order: JobOrder = JobOrder.oldest) -> int:
    """The id a page continues from; BadRequest for a cursor not given out, or given for the other order."""
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        prefix, _, value = text.partition(":")
        last_id = int(value)
        if prefix not in CURSOR_PREFIXES.values() or not 0 <= last_id <= MAX_ID:
            raise ValueError(text)
    except (ValueError, UnicodeDecodeError, binascii.Error):
        raise BadRequest("cursor is not one this service gave out") from None
    if prefix != CURSOR_PREFIXES[order]:
        given = next(o for o, p in CURSOR_PREFIXES.items() if p == prefix)
        raise BadRequest(
            f"the cursor continues the order {given.value}, not {order.value}: ask with order={given.value}"
        )
    return last_id


@router.post("", status_code=201, response_model=SubmitResponse, summary="Submit 1..10 000 jobs")
async def submit_jobs(body: SubmitRequest, caller: Submitters, conn: Connection, settings: CurrentSettings) -> dict:
    """All jobs are queued, or none is. A job naming a job class gets its default
    priority class and is held to its access lists and maximum."""
    # read before the submission's transaction: a class replaced in between acts as if
    # it had been replaced just after this submission
    named = await job_classes.load_named(conn, (spec.job_class for spec in body.jobs))
    specs = priority_classes.check_submission(caller, body.jobs, named)
    if len(body.jobs) > settings.jobs.max_batch:
        raise InvalidInput(
            f"{len(body.jobs)} jobs in one request; the limit is {settings.jobs.max_batch}",
            [{"loc": ["body", "jobs"], "msg": "too many jobs", "type": "too_long"}],
        )
    queued = await submission.submit(conn, specs, settings, by=caller.sub)
    SUBMITTED_JOBS.inc(len(queued))
    return {"jobs": queued}


@router.post(
    "/purge",
    response_model=PurgeResult,
    responses={
        503: {
            "description": "The archive (retention.archive_dir) cannot be written: the purge stopped "
            "before deleting the jobs it could not archive.",
            "content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
    },
    summary="Purge finished jobs now (admin)",
)
async def purge_jobs(body: PurgeRequest, caller: Admin, conn: Connection, settings: CurrentSettings) -> dict:
    """Deletes the jobs in the given final statuses that finished more than
    `older_than_seconds` ago, with their specs, events and request ids, in batches of
    `retention.batch_size` (each its own transaction), archived first when
    `retention.archive_dir` is set. A dry run counts them and deletes nothing.
    Fair-share usage is kept: it never refers to a job's row."""
    purged = await retention.purge_jobs(
        conn, settings, timedelta(seconds=body.older_than_seconds), body.statuses, dry_run=body.dry_run,
        runner=f"{caller.sub} via {runner_name()}",
    )  # fmt: skip
    if not body.dry_run:
        await audit.record(conn, caller.sub, "purge.run", None, {"asked": body.model_dump(mode="json"),
                                                                  "jobs": purged.get("jobs")})  # fmt: skip
    return purged


@router.get("", response_model=JobPage, summary="List jobs, oldest or newest first")
async def list_jobs(caller: AnyRole, conn: Connection, query: Annotated[JobQuery, Query()]) -> dict:
    """The jobs the caller sees (users: their own) that pass every given filter, in pages in
    job-id order (`order=newest`: the reverse). A parameter this listing does not take is a 422
    that names it."""
    cursor = query.after or query.cursor
    after_id = decode_cursor(cursor, query.order) if cursor else None
    page, next_after = await jobs.list_jobs(
        conn, query, after_id=after_id, limit=query.limit, scope=policy.job_scope(caller), order=query.order
    )
    return {"jobs": page, "next_cursor": encode_cursor(next_after, query.order) if next_after else None}


@router.get("/{job_id}", response_model=Job, summary="One job")
async def get_job(job_id: JobId, caller: AnyRole, conn: Connection) -> Job:
    return await jobs.get(conn, job_id, policy.job_scope(caller))


@router.get("/by-external-id/{external_id}", response_model=Job, summary="The job known by a submitter's id")
async def get_job_by_external_id(external_id: ExternalId, caller: AnyRole, conn: Connection) -> Job:
    """The unfinished job holding the external id, else the newest job that held it (the id is
    free again once its job finished or was handed off). 404 when no job the caller sees has it."""
    return await jobs.by_external_id(conn, external_id, policy.job_scope(caller))


@router.delete(
    "/by-external-id/{external_id}",
    response_model=Job,
    responses={
        409: {
            "description": "The job holding the id is no longer waiting (a match took it first).",
            "content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
    },
    summary="Withdraw the waiting job known by a submitter's id",
)
async def withdraw_job(external_id: ExternalId, caller: Submitters, conn: Connection) -> Job:
    """The Waiting or Held job holding the id leaves its task queue for good and ends Killed,
    as DIRAC's `deleteJob` takes a job out of its TaskQueueDB. 404 when no unfinished job the
    caller sees holds the id; users withdraw their own jobs only."""
    return await jobs.withdraw(conn, external_id, policy.job_scope(caller), by=caller.sub)


@router.get("/{job_id}/history", response_model=JobHistory, summary="What happened to a job, and who did it")
async def job_history(job_id: JobId, caller: AnyRole, conn: Connection) -> dict:
    """Every status the job took, oldest first, with its minor status, what made the change
    and who acted (DIRAC's `dirac-wms-job-logging-info`). Users see their own jobs' history."""
    return await jobs.history(conn, job_id, policy.job_scope(caller))


@router.patch(
    "/{job_id}",
    response_model=Job,
    responses={
        409: {
            "description": "The job is final (Done, Failed, Killed): its priority can no longer change.",
            "content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
    },
    summary="Change a job's user priority and/or priority class",
)
async def change_priority(
    job_id: JobId, body: PriorityChange, caller: Submitters, conn: Connection, settings: CurrentSettings
) -> Job:
    """Users may only lower the priority class of their own jobs and set the user
    priority 0..10; admins and operators may set anything. A Waiting job moves to
    the task queue of its new class at once; any other non-final job keeps the
    values for when it is rescheduled."""
    check_class = partial(priority_classes.check_class_change, caller, requested=body.priority_class)
    job = await reprioritise.change_priority(
        conn, job_id, body, settings, check_class=check_class, scope=policy.job_scope(caller), by=caller.sub
    )
    now = {"user_priority": job.user_priority, "priority_class": job.priority_class}
    await audit.record(
        conn, caller.sub, "job.priority", str(job_id), {"asked": body.model_dump(mode="json"), "new": now}
    )
    return job


@router.post(
    "/{job_id}/reschedule",
    response_model=Job,
    responses={
        409: {
            "description": "The job is neither Matched nor Stalled: only a job held by a pilot goes back.",
            "content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
    },
    summary="Put a Matched or Stalled job back in its task queue",
)
async def reschedule_job(job_id: JobId, caller: Submitters, conn: Connection, settings: CurrentSettings) -> Job:
    """The owner's (or an operator's or admin's) own reschedule, as DIRAC's
    `dirac-wms-job-reschedule`: it does not count in the job's `reschedules`, which bound
    only the returns nobody asked for (a pilot handing the job back, a lapsed lease, a
    stalled job). Users reschedule their own jobs only."""
    job = await jobs.reschedule(
        conn, job_id, utcnow(), settings, source="reschedule", minor_status="rescheduled by its owner",
        scope=policy.job_scope(caller), by=caller.sub,
    )  # fmt: skip
    assert job is not None  # without `only_if` the job always moves
    return job


@router.delete("/{job_id}", response_model=Job, summary="Kill a job")
async def kill_job(job_id: JobId, caller: Submitters, conn: Connection) -> Job:
    return await jobs.kill(conn, job_id, policy.job_scope(caller), by=caller.sub)


@reports.post("/{job_id}/status", response_model=Job, summary="Report a status (also the heartbeat)")
async def report_status(job_id: JobId, body: StatusUpdate, caller: PilotsAndOperators, request: Request) -> Response:
    """`Running` confirms a Matched job (and again is the heartbeat); `Done` or `Failed` finish
    it (a pilot that cannot start its Matched job fails it straight away); `Waiting` hands
    it back to its task queue, which counts in its `reschedules` when a pilot asks (past
    `jobs.max_reschedules` the job fails instead) and not when an operator or admin does.
    Any other transition is a 409."""
    # the pilots' other frequent call: it takes its connection and settings itself, as /match does
    settings: Settings = request.app.state.settings
    async with connection(request) as conn:
        job = await jobs.report_status(
            conn, job_id, body, settings, policy.job_scope(caller), by=caller.sub, counted=policy.return_counts(caller)
        )
    # the job was validated as it was read: encoded by its model, not validated a second time
    return Response(job.model_dump_json(), media_type="application/json")
