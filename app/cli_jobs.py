"""`fairmatch jobs …`: submit, list, show, kill and reprioritise jobs over the REST API."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any
from urllib.parse import urlencode

import typer
from rich.table import Table

from app import cli as core
from app.cli_client import Service, TokenOption, UrlOption, call_api, connect
from app.cli_common import EXIT_USAGE, fail
from app.jobs.lifecycle import JobStatus

PAGE_SIZE = 1000  # the largest page GET /jobs gives
MAX_ID = 2**63 - 1

jobs_cli = typer.Typer(help="Submit, list, inspect, kill and reprioritise jobs.", no_args_is_help=True)
core.cli.add_typer(jobs_cli, name="jobs")
jobs_cli.command("submit")(core.submit)

JobId = Annotated[int, typer.Argument(min=1, max=MAX_ID, metavar="ID", help="The job's id.", show_default=False)]


class ReportedStatus(StrEnum):
    """What a status report may set (the rest of the lifecycle is the service's)."""

    Running = "Running"
    Done = "Done"
    Failed = "Failed"
    Stalled = "Stalled"
    Waiting = "Waiting"


@jobs_cli.command("list")
def list_jobs(
    status: Annotated[JobStatus | None, typer.Option(case_sensitive=False, help="Only jobs in this state.")] = None,
    owner: Annotated[str | None, typer.Option(help="Only jobs of this owner.")] = None,
    group: Annotated[str | None, typer.Option(help="Only jobs of this owner group.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many jobs, oldest first.")] = 100,
    all_pages: Annotated[bool, typer.Option("--all", help="Every matching job: follow all pages.")] = False,
    cursor: Annotated[str | None, typer.Option(help="Continue a listing: its next_cursor.")] = None,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """List jobs, oldest first, following the service's pages.

    With --limit the answer's next_cursor continues the listing (--cursor); --all lists everything.
    """
    query = {"status": status.value if status else None, "owner": owner, "owner_group": group}
    jobs, next_cursor = fetch_jobs(connect(url, token), query, None if all_pages else limit, cursor)
    core.show({"jobs": jobs, "next_cursor": next_cursor}, job_list_table)


def fetch_jobs(
    api: Service, query: dict[str, Any], limit: int | None, cursor: str | None
) -> tuple[list[dict], str | None]:
    """Pages of GET /jobs until `limit` jobs (None: all) or the last page; the cursor after them."""
    jobs: list[dict] = []
    while True:
        size = PAGE_SIZE if limit is None else min(PAGE_SIZE, limit - len(jobs))
        params = {k: v for k, v in {**query, "limit": size, "cursor": cursor}.items() if v is not None}
        page = call_api(api, "GET", f"/jobs?{urlencode(params)}")
        jobs += page["jobs"]
        cursor = page["next_cursor"]
        if cursor is None or (limit is not None and len(jobs) >= limit):
            return jobs, cursor


def job_list_table(document: dict) -> Table:
    caption = f"{len(document['jobs'])} jobs"
    if document["next_cursor"]:
        caption += f"; more with --cursor {document['next_cursor']}"
    table = core.new_table("Jobs", "id", "status", "owner", "group", "TQ", "class", "uprio", "site", "submitted",
                           caption=caption)  # fmt: skip
    for job in document["jobs"]:
        table.add_row(
            str(job["job_id"]), job["status"], job["owner"], job["owner_group"],
            dash(job["task_queue_id"]), str(job["priority_class"]), str(job["user_priority"]),
            dash(job["site"]), job["submitted_at"][:19].replace("T", " "),
        )  # fmt: skip
    return table


def dash(value: Any) -> str:
    return "-" if value is None else str(value)


def show_job(job: dict, title: str) -> None:
    core.show(job, lambda doc: core.fields_table(title, doc))


@jobs_cli.command("show")
def show(job_id: JobId, url: UrlOption = None, token: TokenOption = None) -> None:
    """One job: state, requirements, payload, where and when it ran."""
    show_job(call_api(connect(url, token), "GET", f"/jobs/{job_id}"), f"Job {job_id}")


@jobs_cli.command("kill")
def kill(job_id: JobId, url: UrlOption = None, token: TokenOption = None) -> None:
    """Kill a job that has not finished (a finished one is refused)."""
    job = call_api(connect(url, token), "DELETE", f"/jobs/{job_id}")
    show_job(job, f"Job {job_id} killed")


@jobs_cli.command("priority")
def priority(
    job_id: JobId,
    user_priority: Annotated[
        int | None, typer.Option(min=0, max=10, help="0 = background, 1 default, 10 = always first.")
    ] = None,
    priority_class: Annotated[
        int | None, typer.Option(min=-1023, max=1024, help="Strict priority class (users may only lower it).")
    ] = None,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Change a job's user priority and/or priority class.

    A waiting job moves to the task queue of its new class at once.
    """
    if user_priority is None and priority_class is None:
        fail("give --user-priority, --priority-class or both", EXIT_USAGE)
    change = {"user_priority": user_priority, "priority_class": priority_class}
    body = {k: v for k, v in change.items() if v is not None}
    job = call_api(connect(url, token), "PATCH", f"/jobs/{job_id}", body)
    show_job(job, f"Job {job_id}")


@jobs_cli.command("status")
def report_status(
    job_id: JobId,
    status: Annotated[
        ReportedStatus,
        typer.Argument(
            case_sensitive=False, metavar="STATUS", show_default=False,
            help="Running, Done, Failed, Stalled or Waiting.",
        ),  # fmt: skip
    ],
    minor_status: Annotated[str | None, typer.Option(help="Free text shown with the status.")] = None,
    cpu_seconds: Annotated[float | None, typer.Option(min=0, help="CPU seconds used so far.")] = None,
    wall_seconds: Annotated[float | None, typer.Option(min=0, help="Wall-clock seconds so far.")] = None,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Report a job's status by hand, as its pilot would (Running again is a heartbeat)."""
    report = {"status": status.value, "minor_status": minor_status,
              "cpu_seconds": cpu_seconds, "wall_seconds": wall_seconds}  # fmt: skip
    body = {k: v for k, v in report.items() if v is not None}
    job = call_api(connect(url, token), "POST", f"/jobs/{job_id}/status", body)
    show_job(job, f"Job {job_id}")
