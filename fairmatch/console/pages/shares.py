"""/ui/shares: the last priority run's shares, usage and factors (sshare), and `sshare -a`."""

from __future__ import annotations

from fastapi import Request, Response

from fairmatch.api.deps import Connection
from fairmatch.api.schemas import AssociationUsage, PriorityRun
from fairmatch.console import auth, render
from fairmatch.console.routing import console_router
from fairmatch.priority.origin import origin_columns, origin_headers
from fairmatch.services import priorities
from fairmatch.services.background import runner_name

router = console_router()


@router.get("/shares")
async def shares(request: Request, caller: auth.Operator, conn: Connection) -> Response:
    settings = request.app.state.settings
    # read as the API answers it: the same fields, defaults included
    run = PriorityRun.model_validate(
        await priorities.shares(conn, settings, request.app.state.corrections, runner=runner_name())
    )
    associations = [AssociationUsage.model_validate(row) for row in await priorities.association_usage(conn, settings)]
    queues = [{**tq, "columns": origin_columns(run.policy, tq.get("origin"))} for tq in run.task_queue_priorities]
    return render.page(
        request, "shares.html", caller, section="shares", run=run, associations=associations,
        queues=queues, origin_headers=origin_headers(run.policy),
    )  # fmt: skip
