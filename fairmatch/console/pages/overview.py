"""/ui/: jobs in each state, the match rate, achieved shares against targets, warnings."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from fastapi import Query, Request, Response
from fastapi.responses import RedirectResponse

from fairmatch.api.deps import Connection
from fairmatch.clock import utcnow
from fairmatch.console import auth, render
from fairmatch.console.charts import BAR_GAP, BAR_HEIGHT, BAR_WIDTH, SPANS, minute_bars, share_chart
from fairmatch.console.routing import PREFIX, console_router
from fairmatch.console.warnings import priority_run_state, warnings
from fairmatch.errors import InvalidInput
from fairmatch.services import status

router = console_router()
EMPTY_MATCH_WINDOW = timedelta(hours=1)
RATE_MINUTES = 15  # the bars of matches per minute


@router.get("/")
async def overview(
    request: Request,
    caller: auth.Viewer,
    conn: Connection,
    span: Annotated[str | None, Query(max_length=8, description="How far back the chart of shares reaches.")] = None,
) -> Response:
    if span is not None and span not in SPANS:
        raise InvalidInput(f"span={span!r}: the chart of shares spans {', '.join(SPANS)}", [])
    if not caller.privileged:
        return RedirectResponse(f"{PREFIX}/jobs", status_code=303)  # users see their own jobs
    settings = request.app.state.settings
    summary = await status.summary(conn, top=10, matching=settings.effective_matching)
    now = summary["generated_at"]
    reach = SPANS[span] if span else timedelta(hours=settings.console.share_hours)
    since = now - reach
    seen = await status.activity(
        conn, since=since, now=now, minutes=RATE_MINUTES, pilots_since=now - EMPTY_MATCH_WINDOW
    )
    interval = settings.priority.interval_seconds
    return render.page(
        request, "overview.html", caller, section="overview",
        summary=summary,
        chart=share_chart(seen.running, seen.shares, since, utcnow()), spans=list(SPANS),
        span=next((name for name, length in SPANS.items() if length == reach), None),
        bars=minute_bars(seen.matches_per_minute), bar_width=BAR_WIDTH, bar_height=BAR_HEIGHT, gap=BAR_GAP,
        stale=priority_run_state(summary["last_priority_run"], interval, now),
        warnings=warnings(summary["last_priority_run"], interval, summary["database_warnings"], seen.per_site, now,
                          summary["share_drift"]),
    )  # fmt: skip
