"""/ui/shares: the last priority run's shares, usage and factors (sshare), and `sshare -a`."""

from __future__ import annotations

from fastapi import Request, Response

from fairmatch.api.deps import Connection
from fairmatch.api.schemas import AssociationUsage
from fairmatch.console import auth, render
from fairmatch.console.routing import console_router
from fairmatch.priority.origin import origin_columns, origin_labels
from fairmatch.services import priorities
from fairmatch.services.background import runner_name

router = console_router()
LISTED = 200  # task-queue priorities shown (rank, multifactor); the task-queue page lists them all


@router.get("/shares")
async def shares(request: Request, caller: auth.Operator, conn: Connection) -> Response:
    settings = request.app.state.settings
    run = await priorities.shares(conn, settings, request.app.state.corrections, runner=runner_name())
    associations = [AssociationUsage.model_validate(row) for row in await priorities.association_usage(conn, settings)]
    # a run holds every queue's priority (10,000 at a large site): only the listed ones are read
    listed = run.get("task_queue_priorities", [])
    queues = [{**tq, "columns": origin_columns(run["policy"], tq.get("origin"))} for tq in listed[:LISTED]]
    return render.page(
        request, "shares.html", caller, section="shares", run=run, associations=associations,
        queues=queues, queue_count=len(listed), origin_labels=origin_labels(run["policy"]),
    )  # fmt: skip
