"""The job filters the listing and the bulk commands share, and a bulk action asked for
and confirmed on a terminal."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from fairmatch.cli import render
from fairmatch.cli.client import Service, call_api
from fairmatch.cli.common import EXIT_USAGE, enum_parser, fail
from fairmatch.cli.render import new_table, show
from fairmatch.jobs.lifecycle import JobStatus

Status = Annotated[
    list[JobStatus] | None,
    typer.Option(parser=enum_parser(JobStatus), help="Only jobs in this state; repeat for several."),
]
Owner = Annotated[str | None, typer.Option(help="Only jobs of this owner.")]
Group = Annotated[str | None, typer.Option("--group", "--owner-group", help="Only jobs of this owner group.")]
Account = Annotated[str | None, typer.Option(help="Only jobs charged to this account.")]
Site = Annotated[str | None, typer.Option(help="Only jobs matched at this site.")]
TaskQueue = Annotated[int | None, typer.Option(min=1, help="Only jobs last queued in this task queue.")]
Since = Annotated[str | None, typer.Option(help="Only jobs submitted at or after this ISO 8601 time.")]
Until = Annotated[str | None, typer.Option(help="Only jobs submitted before this ISO 8601 time.")]
DryRun = Annotated[bool, typer.Option("--dry-run", help="Only count and list the jobs it would change.")]
Yes = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation on a terminal.")]
JobIds = Annotated[
    list[int] | None,
    typer.Argument(min=1, max=2**63 - 1, metavar="ID", help="These jobs (with filters: those of them that pass).",
                   show_default=False),
]  # fmt: skip


def filters(
    status: list[JobStatus] | None, owner: str | None, group: str | None, account: str | None, site: str | None,
    task_queue: int | None, since: str | None, until: str | None,
) -> dict[str, Any]:  # fmt: skip
    """The listing's filters as GET /jobs and the bulk actions take them (those given)."""
    given = {"status": [s.value for s in status or ()], "owner": owner, "owner_group": group, "account": account,
             "site": site, "task_queue_id": task_queue, "since": since, "until": until}  # fmt: skip
    return {k: v for k, v in given.items() if v not in (None, [])}


def act(api: Service, action: str, selection: dict[str, Any], *, dry_run: bool, yes: bool, **more: Any) -> None:
    """POST /jobs/<action> on the selection. On a terminal, unless --yes or --dry-run, a dry
    run first says how many jobs it would change, and the action waits for a yes."""
    if not selection:
        fail("name the jobs: give job ids or at least one filter", EXIT_USAGE)
    body = {"filter": selection, **more}
    if not dry_run and not yes and render.stdin_is_tty():
        would = call_api(api, "POST", f"/jobs/{action}", {**body, "dry_run": True})
        if would["changed"] == 0:
            show(would, _result_table(action, dry_run=True))
            return
        if not typer.confirm(f"{action} {would['changed']:,} of the {would['matched']:,} jobs selected?", err=True):
            raise typer.Abort()
    result = call_api(api, "POST", f"/jobs/{action}", {**body, "dry_run": dry_run})
    show(result, _result_table(action, dry_run=dry_run))


def _result_table(action: str, *, dry_run: bool):
    def view(result: dict[str, Any]):
        verb = "would change" if dry_run else "changed"
        table = new_table(f"jobs {action}", "selected", verb, "job ids",
                          caption=None if len(result["job_ids"]) == result["changed"] else "the first ids only")  # fmt: skip
        ids = ", ".join(map(str, result["job_ids"][:20])) + (" …" if len(result["job_ids"]) > 20 else "")
        table.add_row(f"{result['matched']:,}", f"{result['changed']:,}", ids or "—")
        return table

    return view
