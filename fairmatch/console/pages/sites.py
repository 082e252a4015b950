"""/ui/sites: the site mask, the site limits with what each limited value runs now, and pilots."""

from __future__ import annotations

from datetime import timedelta

from fastapi import Request, Response

from fairmatch.api.deps import Connection
from fairmatch.clock import utcnow
from fairmatch.console import auth, render
from fairmatch.console.routing import console_router
from fairmatch.console.states import PilotState, limit_state, site_state
from fairmatch.db.pilots import PilotFilter
from fairmatch.services import pilots, status

router = console_router()
PILOT_WINDOW = timedelta(hours=1)  # the per-site tally of pilots


@router.get("/sites")
async def sites(request: Request, caller: auth.Operator, conn: Connection) -> Response:
    settings = request.app.state.settings
    seen = await status.sites(conn, utcnow() - PILOT_WINDOW)
    recent, _ = await pilots.list_pilots(conn, PilotFilter(), None, settings.console.page_size)
    banned = {entry["site"] for entry in seen.mask}
    return render.page(
        request, "sites.html", caller, section="sites", mask=seen.mask,
        limits=[{**limit, "state": limit_state(limit["running"], limit["running_limit"])} for limit in seen.limits],
        recent=[{**dict(pilot), "state": PilotState.HasJob if pilot.current_job_id else PilotState.NoJob}
                for pilot in recent],
        per_site=[(row, site_state(row.site in banned, row.matches, row.empty_matches)) for row in seen.per_site],
        window_minutes=int(PILOT_WINDOW.total_seconds() // 60),
        test_job_types=settings.matching.masked_site_job_types,
    )  # fmt: skip
