"""/ui/sites: the site mask, the site limits with what each limited value runs now, and pilots."""

from __future__ import annotations

from datetime import timedelta

from fastapi import Request, Response

from fairmatch.api.deps import Connection
from fairmatch.clock import utcnow
from fairmatch.console import auth, render
from fairmatch.console.routing import console_router
from fairmatch.db.pilots import PilotFilter
from fairmatch.services import limits, pilots, site_mask

router = console_router()
PILOT_WINDOW = timedelta(hours=1)  # the per-site tally of pilots


@router.get("/sites")
async def sites(request: Request, caller: auth.Operator, conn: Connection) -> Response:
    settings = request.app.state.settings
    mask = await site_mask.list_mask(conn)
    site_limits = await limits.list_limits(conn)
    recent, _ = await pilots.list_pilots(conn, PilotFilter(), None, settings.console.page_size)
    per_site = await pilots.per_site(conn, utcnow() - PILOT_WINDOW)
    return render.page(
        request, "sites.html", caller, section="sites", mask=mask, limits=site_limits, recent=recent,
        per_site=per_site, window_minutes=int(PILOT_WINDOW.total_seconds() // 60),
        test_job_types=settings.matching.masked_site_job_types,
    )  # fmt: skip
