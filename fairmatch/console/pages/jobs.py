"""/ui/jobs: the jobs the caller sees, newest first, with the filters and cursor of `GET /jobs?order=newest`;
/ui/jobs/{id}: one job and its history.

Both read through the services the API calls, in the caller's JobScope (users: their
own jobs), and offer the hold/release/kill forms that pages/actions.py answers.
"""

from __future__ import annotations

from datetime import datetime
from urllib.parse import urlencode

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from fairmatch.api.deps import Connection
from fairmatch.api.jobs import JobId, decode_cursor, encode_cursor
from fairmatch.auth import policy
from fairmatch.console import auth, render
from fairmatch.console.forms import chosen
from fairmatch.console.routing import PREFIX, console_router
from fairmatch.jobs.filters import JobFilter, JobOrder
from fairmatch.jobs.lifecycle import JobStatus
from fairmatch.jobs.views import Job
from fairmatch.services import bulk, jobs

router = console_router()

CURSOR = "after"
ORDER = JobOrder.newest  # the latest submitted first: what an operator looks for first
BULK_ACTIONS = ("hold", "release", "kill")
# the times a job's row keeps; the latest is its last update (a hold or a release shows only in its history)
MOMENTS = ("submitted_at", "matched_at", "started_at", "heartbeat_at", "finished_at")


def _filters_of(request: Request) -> tuple[JobFilter, dict[str, str]]:
    """The listing's filters from the query string, and the same as text for the forms
    (blank fields dropped). A parameter the listing does not take or a bad value is a 422
    page, as `GET /jobs` refuses them."""
    # the multi-select repeats `status`; typed by hand, the states are separated by commas
    filled = chosen(((k, v) for k, v in request.query_params.multi_items() if k != CURSOR), several=("status",))
    given = {name: ",".join(value) if isinstance(value, list) else value for name, value in filled.items()}
    try:
        selected = JobFilter.model_validate(filled)
    except ValidationError as exc:
        # raised as the route's own validation error, so that routing shows its 422 page
        raise RequestValidationError([{**e, "loc": ("query", *e["loc"])} for e in exc.errors()]) from None
    return selected, given


def _last_update(job: Job) -> datetime | None:
    return max((moment for moment in (getattr(job, name) for name in MOMENTS) if moment is not None), default=None)


def _here(request: Request) -> str:
    """This page's own path, for an action to come back to."""
    return request.url.path + (f"?{request.url.query}" if request.url.query else "")


@router.get("/jobs")
async def job_list(request: Request, caller: auth.Viewer, conn: Connection) -> Response:
    chosen, given = _filters_of(request)
    cursor = request.query_params.get(CURSOR, "")
    page_size = request.app.state.settings.console.page_size
    found, next_after = await jobs.list_jobs(
        conn, chosen, after_id=decode_cursor(cursor, ORDER) if cursor else None, limit=page_size,
        scope=policy.job_scope(caller), order=ORDER,
    )  # fmt: skip
    filtered = f"{PREFIX}/jobs?{urlencode(given)}" if given else f"{PREFIX}/jobs"
    return render.page(
        request, "jobs.html", caller, section="jobs",
        jobs=[{**dict(job), "last_update": _last_update(job)} for job in found],
        given=given,
        statuses=[state.value for state in JobStatus],
        first_page=filtered if cursor else None,
        next_page=f"{PREFIX}/jobs?{urlencode({**given, CURSOR: encode_cursor(next_after, ORDER)})}" if next_after else None,
        actions=BULK_ACTIONS,
        here=_here(request),
    )  # fmt: skip


def _actions_for(status: JobStatus) -> list[str]:
    """The actions that would change a job in `status`: the bulk actions' own rule."""
    return [action for action in BULK_ACTIONS if bulk.applies(bulk.BulkAction(action), status)]


@router.get("/jobs/{job_id}")
async def job_page(job_id: JobId, request: Request, caller: auth.Viewer, conn: Connection) -> Response:
    # another user's job is as missing as one that never existed: 404 from the scope
    scope = policy.job_scope(caller)
    job = await jobs.get(conn, job_id, scope)
    events = (await jobs.history(conn, job_id, scope))["events"]
    return render.page(
        request, "job.html", caller, section="jobs",
        job=job,
        events=events,
        actions=_actions_for(JobStatus(job.status)),
    )  # fmt: skip
