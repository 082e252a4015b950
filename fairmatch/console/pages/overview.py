"""/ui/: jobs in each state, the match rate, achieved shares against targets, warnings."""

from __future__ import annotations

from datetime import timedelta

from fastapi import Request, Response
from fastapi.responses import RedirectResponse

from fairmatch.api.deps import Connection
from fairmatch.clock import utcnow
from fairmatch.console import auth, render
from fairmatch.console.charts import share_chart
from fairmatch.console.routing import PREFIX, console_router
from fairmatch.console.warnings import priority_run_state, warnings
from fairmatch.db.engine import read_transaction
from fairmatch.db.pilots import PilotDB
from fairmatch.db.priorities import PriorityDB
from fairmatch.services import status

router = console_router()
EMPTY_MATCH_WINDOW = timedelta(hours=1)


@router.get("/")
async def overview(request: Request, caller: auth.Viewer, conn: Connection) -> Response:
    if not caller.privileged:
        return RedirectResponse(f"{PREFIX}/jobs", status_code=303)  # users see their own jobs
    settings = request.app.state.settings
    summary = await status.summary(conn, top=10)
    now = summary["generated_at"]
    since = now - timedelta(hours=settings.console.share_hours)
    async with read_transaction(conn):
        priorities = PriorityDB.of(conn)
        history = await priorities.running_history(since)
        shares = await priorities.group_shares()
        sites = await PilotDB.of(conn).per_site(now - EMPTY_MATCH_WINDOW)
    interval = settings.priority.interval_seconds
    return render.page(
        request, "overview.html", caller, section="overview",
        summary=summary,
        chart=share_chart(history, shares, since, utcnow()),
        stale=priority_run_state(summary["last_priority_run"], interval, now),
        warnings=warnings(summary["last_priority_run"], interval, summary["database_warnings"], sites, now),
    )  # fmt: skip
