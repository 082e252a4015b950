"""/ui/actions/...: what the console changes, each behind a confirmation and audited.

A form posts once without `confirmed`: the console answers with what the action
would do (a bulk action's dry run counts the jobs) and a form to confirm it. The
confirmed post does it, through the same service as the API, which audits it.
Every post carries the session's CSRF token and comes from the console's origin.
"""

from __future__ import annotations

from fastapi import Request, Response
from pydantic import BaseModel

from fairmatch.api.deps import Connection
from fairmatch.api.site_mask import Ban, SiteName
from fairmatch.auth import policy
from fairmatch.auth.tokens import Principal
from fairmatch.console import auth, render
from fairmatch.console.forms import chosen, read_form
from fairmatch.console.routing import console_router, local_path
from fairmatch.errors import InvalidInput
from fairmatch.jobs.filters import JobSelection
from fairmatch.services import bulk, site_mask
from fairmatch.services import priorities as priority_service
from fairmatch.services.background import runner_name

router = console_router()


# the API's rules for a site's name and a ban's reason, named as the form's fields
class SiteForm(BaseModel):
    site: SiteName


class BanForm(Ban):
    site: SiteName


CONFIRMED = "confirmed"
# the bulk actions the console offers, with what a confirmation says of each
JOB_ACTIONS = {
    bulk.BulkAction.hold: "Hold: the waiting jobs leave matching until they are released.",
    bulk.BulkAction.release: "Release: the held jobs wait in their task queues again, at the place their ids give them.",
    bulk.BulkAction.kill: "Kill: every unfinished job ends as Killed. This cannot be undone.",
}
SELECTION_FIELDS = tuple(JobSelection.model_fields)  # the listing's filters and job_ids


async def _posted(request: Request) -> dict[str, str]:
    form = await read_form(request)
    auth.check_form(request, form)
    return form


def _confirm(
    request: Request, caller: Principal, form: dict[str, str], *, title: str, lines: list[str], danger: bool = False,
    warnings: list[str] | None = None,
) -> Response:  # fmt: skip
    """The page that asks to confirm: the same form again, confirmed; `warnings` above it."""
    resent = {k: v for k, v in form.items() if k not in (auth.CSRF_FIELD, CONFIRMED)}
    return render.page(request, "confirm.html", caller, title=title, lines=lines, action=request.url.path,
                       fields=resent, confirmed=CONFIRMED, danger=danger, back=local_path(form.get("back")),
                       warnings=warnings or [])  # fmt: skip


def _done(request: Request, caller: Principal, form: dict[str, str], *, title: str, lines: list[str]) -> Response:
    return render.page(request, "done.html", caller, title=title, lines=lines, back=local_path(form.get("back")))


def selection_of(form: dict[str, str]) -> JobSelection:
    """The jobs a bulk form names: the listing's filters and/or job ids (ValidationError if none)."""
    fields = ((name, value) for name, value in form.items() if name in SELECTION_FIELDS)
    return JobSelection.model_validate(chosen(fields, several=("status", "job_ids")))


@router.post("/actions/jobs/{action}")
async def jobs_action(action: bulk.BulkAction, request: Request, caller: auth.Viewer, conn: Connection) -> Response:
    """Hold, release or kill every job a filter selects (users: their own jobs only)."""
    if action not in JOB_ACTIONS:
        raise InvalidInput(f"the console offers {', '.join(a.value for a in JOB_ACTIONS)}, not {action.value}", [])
    form = await _posted(request)
    selection = selection_of(form)
    settings = request.app.state.settings
    confirmed = form.get(CONFIRMED) == "yes"
    outcome = await bulk.act(conn, bulk.Request(
        action=action, selection=bulk.Selection(selection, selection.job_ids), by=caller.sub,
        scope=policy.job_scope(caller), dry_run=not confirmed,
    ), settings)  # fmt: skip
    verb = action.value
    if not confirmed:
        lines = [JOB_ACTIONS[action],
                 f"The filter selects {outcome['matched']:,} jobs you may act on; {verb} changes {outcome['changed']:,} of them."]  # fmt: skip
        return _confirm(request, caller, form, title=f"{verb.capitalize()} jobs?", lines=lines,
                        danger=action is bulk.BulkAction.kill)  # fmt: skip
    lines = [f"{outcome['changed']:,} of the {outcome['matched']:,} selected jobs: {verb} done."]
    if outcome["job_ids"]:
        lines.append("First jobs changed: " + ", ".join(str(i) for i in outcome["job_ids"][:20]))
    return _done(request, caller, form, title=f"{verb.capitalize()} done", lines=lines)


@router.post("/actions/site-mask/ban")
async def ban_site(request: Request, caller: auth.Operator, conn: Connection) -> Response:
    form = await _posted(request)
    ban = BanForm.model_validate({"site": form.get("site", "").strip(), "reason": form.get("reason", "")})
    site, reason = ban.site, ban.reason
    if form.get(CONFIRMED) != "yes":
        lines = [f"Ban {site}: its pilots get only the job types matching.masked_site_job_types names.",
                 f"Reason: {reason}"]  # fmt: skip
        seen = await site_mask.sighting(conn, site)
        warnings = [f"{seen['warning']}: ban it anyway?"] if seen["warning"] else []
        return _confirm(request, caller, form, title=f"Ban {site}?", lines=lines, danger=True, warnings=warnings)
    _, created = await site_mask.ban(conn, site, reason, caller.sub)
    said = "banned" if created else "was banned already; its reason is replaced"
    return _done(request, caller, form, title=f"{site} banned", lines=[f"{site} {said}."])


@router.post("/actions/site-mask/allow")
async def allow_site(request: Request, caller: auth.Operator, conn: Connection) -> Response:
    form = await _posted(request)
    site = SiteForm.model_validate({"site": form.get("site", "").strip()}).site
    if form.get(CONFIRMED) != "yes":
        return _confirm(request, caller, form, title=f"Allow {site}?",
                        lines=[f"Take {site} out of the site mask: its pilots are matched every job again."])  # fmt: skip
    await site_mask.allow(conn, site, caller.sub)
    return _done(request, caller, form, title=f"{site} allowed", lines=[f"{site} is out of the site mask."])


@router.post("/actions/recompute")
async def recompute(request: Request, caller: auth.Admin, conn: Connection) -> Response:
    form = await _posted(request)
    if form.get(CONFIRMED) != "yes":
        return _confirm(request, caller, form, title="Recompute priorities?",
                        lines=["Run the priority loop now: usage is folded and every task queue's priority is set again."])  # fmt: skip
    settings = request.app.state.settings
    run = await priority_service.recompute_now(
        conn, settings, request.app.state.corrections, runner=runner_name(), by=caller.sub
    )
    lines = [f"{run['task_queues']:,} task queues, {run['changed']:,} priorities changed, policy {run['policy']}."]
    return _done(request, caller, form, title="Priorities recomputed", lines=lines)
