"""The job filters the listing and the bulk commands share, and a bulk action counted by a
dry run and confirmed (fairmatch.cli.confirm) before it is made."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from fairmatch.cli.client import Service, call_api
from fairmatch.cli.common import EXIT_USAGE, enum_parser, fail
from fairmatch.cli.confirm import confirm
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
Reason = Annotated[
    str | None,
    typer.Option(help="Why, in one line: the jobs' minor status and their history's, and the audit log's."),
]
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
    """POST /jobs/<action> on the selection. Unless it is --dry-run, a single job by its id
    or --yes, a dry run first says how many jobs it would change, and the action waits for a
    yes (fairmatch.cli.confirm: refused without --yes when stdin is not a terminal)."""
    if not selection:
        fail("name the jobs: give job ids or at least one filter", EXIT_USAGE)
    body = {"filter": selection, **more}
    if not dry_run and not yes and not one_job(selection):
        would = call_api(api, "POST", f"/jobs/{action}", {**body, "dry_run": True})
        if would["changed"] == 0:  # nothing to ask about
            show(would, _result_table(action, dry_run=True))
            return
        confirm(question(action, would, selection, more.get("change")), yes=False)
    result = call_api(api, "POST", f"/jobs/{action}", {**body, "dry_run": dry_run})
    show(result, _result_table(action, dry_run=dry_run))


def one_job(selection: dict[str, Any]) -> bool:
    """A single job named by its id and no filter: as the one-job commands, it is not asked about."""
    return selection.keys() == {"job_ids"} and len(selection["job_ids"]) == 1


def question(action: str, would: dict[str, Any], selection: dict[str, Any], change: dict[str, Any] | None) -> str:
    """ "hold 113 jobs of owner alice", "set user priority 0 on 5 of the 8 jobs in status Running" """
    counted = f"{would['changed']:,} jobs"
    if would["matched"] != would["changed"]:
        counted = f"{would['changed']:,} of the {would['matched']:,} jobs"
    if change:
        values = " and ".join(f"{name.replace('_', ' ')} {value}" for name, value in change.items())
        return f"set {values} on {counted} {described(selection)}"
    return f"{action} {counted} {described(selection)}"


SHOWN_IDS = 5


def described(selection: dict[str, Any]) -> str:
    """The selection in words: "of owner alice, in status Waiting or Held"."""
    said = {
        "job_ids": lambda ids: "with ids " + ", ".join(map(str, ids[:SHOWN_IDS]))
        + (f" (+{len(ids) - SHOWN_IDS})" if len(ids) > SHOWN_IDS else ""),
        "status": lambda statuses: "in status " + " or ".join(statuses),
        "owner": "of owner {}".format,
        "owner_group": "of group {}".format,
        "account": "charged to account {}".format,
        "site": "matched at site {}".format,
        "task_queue_id": "last queued in task queue {}".format,
        "since": "submitted since {}".format,
        "until": "submitted before {}".format,
    }  # fmt: skip
    return ", ".join(said[name](value) for name, value in selection.items())


def _result_table(action: str, *, dry_run: bool):
    def view(result: dict[str, Any]):
        verb = "would change" if dry_run else "changed"
        table = new_table(f"jobs {action}", "selected", verb, "job ids",
                          caption=None if len(result["job_ids"]) == result["changed"] else "the first ids only")  # fmt: skip
        ids = ", ".join(map(str, result["job_ids"][:20])) + (" …" if len(result["job_ids"]) > 20 else "")
        table.add_row(f"{result['matched']:,}", f"{result['changed']:,}", ids or "—")
        return table

    return view
