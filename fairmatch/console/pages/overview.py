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
from fairmatch.services import pilots, status

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
    history, shares = await status.running_history(conn, since)
    sites = await pilots.per_site(conn, now - EMPTY_MATCH_WINDOW)
    interval = settings.priority.interval_seconds
    return render.page(
        request, "overview.html", caller, section="overview",
        summary=summary,
        chart=share_chart(history, shares, since, utcnow()),
        stale=priority_run_state(summary["last_priority_run"], interval, now),
        warnings=warnings(summary["last_priority_run"], interval, summary["database_warnings"], sites, now),
    )  # fmt: skip
