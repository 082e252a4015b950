"""`fairmatch submit` and `fairmatch jobs …`: submit, list, show, trace, kill, reprioritise and purge
jobs over the REST API."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from typing import Annotated, Any
from urllib.parse import urlencode

import typer
from rich.console import Console
from rich.table import Table

from fairmatch.cli import confirm, render, selection
from fairmatch.cli.client import Service, TokenOption, UrlOption, call_api, connect
from fairmatch.cli.common import EXIT_USAGE, enum_parser, fail, note
from fairmatch.cli.files import load_jobs
from fairmatch.cli.render import dash, fields_table, new_table, show, timestamp

BATCH_SIZE = 10_000  # the server's largest POST /jobs
PAGE_SIZE = 1000  # the largest page GET /jobs gives
MAX_ID = 2**63 - 1

app = typer.Typer(
    help="Submit, list, inspect and trace jobs; kill, hold, release, reschedule and reprioritise them, one or many;"
    " purge them.",
    no_args_is_help=True,
)
submit_app = typer.Typer()  # `fairmatch submit`: the same command as `fairmatch jobs submit`

JobId = Annotated[int, typer.Argument(min=1, max=MAX_ID, metavar="ID", help="The job's id.", show_default=False)]


class ReportedStatus(StrEnum):
    """What a status report may set (the rest of the lifecycle is the service's)."""

    Running = "Running"
    Done = "Done"
    Failed = "Failed"
    Stalled = "Stalled"
    Waiting = "Waiting"


# --- submit -----------------------------------------------------------------


@submit_app.command()
@app.command("submit")
def submit(
    file: Annotated[
        str,
        typer.Argument(
            metavar="FILE",
            show_default=False,
            help='Jobs as .json (a list, or {"jobs": [...]}) or .toml ([[jobs]] tables); - reads JSON from stdin.',
        ),
    ],
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Queue the jobs in FILE and show their ids and task queues.

    Jobs go in batches of 10 000. Each batch is queued entirely or not at all, so when a
    batch fails the batches before it stay queued.
    """
    jobs = load_jobs(file)
    api = connect(url, token)
    batches = [jobs[i : i + BATCH_SIZE] for i in range(0, len(jobs), BATCH_SIZE)]
    if len(batches) == 1:
        answer = call_api(api, "POST", "/jobs", {"jobs": jobs})
    else:
        answer = {"jobs": submit_batches(api, batches, len(jobs))}
    show(answer, submitted_table)


def submit_batches(api: Service, batches: list[list[dict]], total: int) -> list[dict]:
    queued: list[dict] = []
    with batch_progress(total) as report:
        for number, batch in enumerate(batches, start=1):
            where = f"batch {number}/{len(batches)} (jobs {len(queued) + 1}-{len(queued) + len(batch)})"
            try:
                queued += call_api(api, "POST", "/jobs", {"jobs": batch})["jobs"]
            except typer.Exit:
                # the error's job indexes count from the batch's first job
                note(f"{where} failed; the {len(queued)} jobs before it stay queued")
                raise
            report(len(batch), f"{where} queued: {len(queued)}/{total} jobs")
    return queued


@contextmanager
def batch_progress(total: int) -> Iterator[Callable[[int, str], None]]:
    """Yields report(jobs_done, line): a progress bar on a terminal, else the line on stderr."""
    if not render.stderr_is_tty():
        yield lambda _done, line: note(line)
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("queueing jobs"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True)) as progress:
        task = progress.add_task("submit", total=total)
        yield lambda done, _line: progress.advance(task, done)


def submitted_table(document: dict) -> Table:
    table = new_table("Jobs", "id", "TQ", "status", caption=f"{len(document['jobs'])} jobs")
    for job in document["jobs"]:
        table.add_row(str(job["job_id"]), str(job["task_queue_id"]), job["status"])
    return table


# --- list -------------------------------------------------------------------


@app.command("list")
def list_jobs(
    status: selection.Status = None,
    owner: selection.Owner = None,
    group: selection.Group = None,
    account: selection.Account = None,
    site: selection.Site = None,
    task_queue: selection.TaskQueue = None,
    since: selection.Since = None,
    until: selection.Until = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many jobs, oldest first.")] = 100,
    all_pages: Annotated[bool, typer.Option("--all", help="Every matching job: follow all pages.")] = False,
    after: Annotated[
        str | None, typer.Option("--after", "--cursor", help="Continue a listing: its next_cursor.")
    ] = None,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """List jobs, oldest first, following the service's pages; every filter given must hold.

    With --limit the answer's next_cursor continues the listing (--after); --all lists everything.
    """
    query = selection.filters(status, owner, group, account, site, task_queue, since, until)
    jobs, next_cursor = fetch_jobs(connect(url, token), query, None if all_pages else limit, after)
    show({"jobs": jobs, "next_cursor": next_cursor}, job_list_table)


def fetch_jobs(
    api: Service, query: dict[str, Any], limit: int | None, cursor: str | None
) -> tuple[list[dict], str | None]:
    """Pages of GET /jobs until `limit` jobs (None: all) or the last page; the cursor after them."""
    jobs: list[dict] = []
    while True:
        size = PAGE_SIZE if limit is None else min(PAGE_SIZE, limit - len(jobs))
        params = {k: v for k, v in {**query, "limit": size, "after": cursor}.items() if v not in (None, [])}
        page = call_api(api, "GET", f"/jobs?{urlencode(params, doseq=True)}")
        jobs += page["jobs"]
        cursor = page["next_cursor"]
        if cursor is None or (limit is not None and len(jobs) >= limit):
            return jobs, cursor


def job_list_table(document: dict) -> Table:
    caption = f"{len(document['jobs'])} jobs"
    if document["next_cursor"]:
        caption += f"; more with --after {document['next_cursor']}"
    table = new_table("Jobs", "id", "status", "owner", "group", "TQ", "class", "uprio", "site", "submitted",
                      caption=caption)  # fmt: skip
    for job in document["jobs"]:
        table.add_row(
            str(job["job_id"]), job["status"], job["owner"], job["owner_group"],
            dash(job["task_queue_id"]), str(job["priority_class"]), str(job["user_priority"]),
            dash(job["site"]), timestamp(job["submitted_at"]),
        )  # fmt: skip
    return table


# --- one job ----------------------------------------------------------------


def show_job(job: dict, title: str) -> None:
    show(job, lambda doc: fields_table(title, doc))


@app.command("show")
def show_one(job_id: JobId, url: UrlOption = None, token: TokenOption = None) -> None:
    """One job: state, requirements, payload, where and when it ran."""
    show_job(call_api(connect(url, token), "GET", f"/jobs/{job_id}"), f"Job {job_id}")


@app.command("history")
def history(job_id: JobId, url: UrlOption = None, token: TokenOption = None) -> None:
    """What happened to a job, oldest first: each status, what made it and who acted."""
    show(call_api(connect(url, token), "GET", f"/jobs/{job_id}/history"), history_table)


def history_table(document: dict) -> Table:
    table = new_table(f"Job {document['job_id']}", "at", "status", "minor status", "source", "by")
    for event in document["events"]:
        table.add_row(timestamp(event["at"]), event["status"], dash(event["minor_status"]), event["source"],
                      dash(event["by"]))  # fmt: skip
    return table


def _bulk(url: str | None, token: str | None, action: str, job_ids: list[int] | None, chosen: dict[str, Any],
          *, dry_run: bool, yes: bool, reason: str | None, **more: Any) -> None:  # fmt: skip
    picked = {**chosen, **({"job_ids": job_ids} if job_ids else {})}
    given = {"reason": reason} if reason is not None else {}
    selection.act(connect(url, token), action, picked, dry_run=dry_run, yes=yes, **given, **more)


def _bulk_command(action: str, doc: str, one: Callable[[Service, int], tuple[dict, str]] | None = None) -> None:
    """`fairmatch jobs ACTION [ID]... [filters]`: the bulk action on the jobs selected; with `one`,
    a single id and no filter (nor reason) take the one-job call instead (its whole job is shown)."""

    def command(
        job_ids: selection.JobIds = None,
        status: selection.Status = None,
        owner: selection.Owner = None,
        group: selection.Group = None,
        account: selection.Account = None,
        site: selection.Site = None,
        task_queue: selection.TaskQueue = None,
        since: selection.Since = None,
        until: selection.Until = None,
        reason: selection.Reason = None,
        dry_run: selection.DryRun = False,
        yes: confirm.Yes = False,
        url: UrlOption = None,
        token: TokenOption = None,
    ) -> None:
        chosen = selection.filters(status, owner, group, account, site, task_queue, since, until)
        if one is not None and job_ids and len(job_ids) == 1 and not chosen and not dry_run and reason is None:
            show_job(*one(connect(url, token), job_ids[0]))
            return
        _bulk(url, token, action, job_ids, chosen, dry_run=dry_run, yes=yes, reason=reason)

    command.__doc__ = doc
    app.command(action)(command)


_bulk_command(
    "kill",
    """Kill jobs that have not finished: one by its id, or every job the ids and filters select
    (`scancel -u`); several jobs only once confirmed (--yes when stdin is not a terminal).""",
    lambda api, job_id: (call_api(api, "DELETE", f"/jobs/{job_id}"), f"Job {job_id} killed"),
)
_bulk_command(
    "hold",
    """Hold waiting jobs (`condor_hold`): never matched until released, their ids and priorities kept.

    Several jobs only once confirmed (--yes when stdin is not a terminal).""",
)
_bulk_command(
    "release",
    """Release held jobs: Waiting again, at the place their ids give them.

    Several jobs only once confirmed (--yes when stdin is not a terminal).""",
)
_bulk_command(
    "reschedule",
    """Put Matched or Stalled jobs back in their task queues (DIRAC's dirac-wms-job-reschedule):
    one by its id, or every job the ids and filters select (once confirmed: --yes when
    stdin is not a terminal).

    Its owner's, an operator's or an admin's own reschedule: it does not count in the job's
    reschedules, which bound the returns nobody asked for.
    """,
    lambda api, job_id: (call_api(api, "POST", f"/jobs/{job_id}/reschedule", None), f"Job {job_id}"),
)


@app.command("priority")
def priority(
    job_ids: selection.JobIds = None,
    user_priority: Annotated[
        int | None, typer.Option(min=0, max=10, help="0 = background, 1 default, 10 = always first.")
    ] = None,
    priority_class: Annotated[
        int | None, typer.Option(min=-1023, max=1024, help="Strict priority class (users may only lower it).")
    ] = None,
    status: selection.Status = None,
    owner: selection.Owner = None,
    group: selection.Group = None,
    account: selection.Account = None,
    site: selection.Site = None,
    task_queue: selection.TaskQueue = None,
    since: selection.Since = None,
    until: selection.Until = None,
    reason: selection.Reason = None,
    dry_run: selection.DryRun = False,
    yes: confirm.Yes = False,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Change the user priority and/or priority class of one job, or of every job the ids and
    filters select (once confirmed: --yes when stdin is not a terminal).

    A waiting job moves to the task queue of its new class at once.
    """
    if user_priority is None and priority_class is None:
        fail("give --user-priority, --priority-class or both", EXIT_USAGE)
    change = {"user_priority": user_priority, "priority_class": priority_class}
    body = {k: v for k, v in change.items() if v is not None}
    chosen = selection.filters(status, owner, group, account, site, task_queue, since, until)
    if job_ids and len(job_ids) == 1 and not chosen and not dry_run and reason is None:
        show_job(call_api(connect(url, token), "PATCH", f"/jobs/{job_ids[0]}", body), f"Job {job_ids[0]}")
        return
    _bulk(url, token, "priority", job_ids, chosen, dry_run=dry_run, yes=yes, reason=reason, change=body)


@app.command("status")
def report_status(
    job_id: JobId,
    status: Annotated[
        ReportedStatus,
        typer.Argument(
            parser=enum_parser(ReportedStatus),
            metavar="STATUS",
            show_default=False,
            help="Running, Done, Failed, Stalled or Waiting.",
        ),
    ],
    minor_status: Annotated[str | None, typer.Option(help="Free text shown with the status.")] = None,
    cpu_seconds: Annotated[float | None, typer.Option(min=0, help="CPU seconds used so far.")] = None,
    wall_seconds: Annotated[float | None, typer.Option(min=0, help="Wall-clock seconds so far.")] = None,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Report a job's status by hand, as its pilot would (Running again is a heartbeat).

    Waiting sent with an operator's or admin's token reschedules the job without counting
    it in its reschedules; with a pilot's token it counts, as any hand-back by a pilot.
    """
    report = {"status": status.value, "minor_status": minor_status,
              "cpu_seconds": cpu_seconds, "wall_seconds": wall_seconds}  # fmt: skip
    body = {k: v for k, v in report.items() if v is not None}
    job = call_api(connect(url, token), "POST", f"/jobs/{job_id}/status", body)
    show_job(job, f"Job {job_id}")


# --- purge ------------------------------------------------------------------

DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class FinalStatus(StrEnum):
    Done = "Done"
    Failed = "Failed"
    Killed = "Killed"
    HandedOff = "HandedOff"


def parse_duration(text: str) -> float:
    """`90m`, `12h`, `3d` (also `30s`, `1.5d`) in seconds."""
    found = DURATION.fullmatch(text.strip())
    if found is None:
        raise typer.BadParameter(f"{text!r} is not a duration such as 90m, 12h or 3d")
    seconds = float(found[1]) * UNIT_SECONDS[found[2]]
    if seconds < 1:
        raise typer.BadParameter(f"{text!r} is shorter than a second")
    return seconds


@app.command("purge")
def purge(
    older_than: Annotated[
        float,
        typer.Option(
            parser=parse_duration,
            metavar="DURATION",
            show_default=False,
            help="Purge jobs that finished at least this long ago: 90m, 12h, 3d.",
        ),
    ],
    status: Annotated[
        list[FinalStatus] | None,
        typer.Option(
            parser=enum_parser(FinalStatus),
            metavar="STATUS",
            help="Only jobs in this final status (repeatable; default every final status).",
        ),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only count the jobs that would be purged.")] = False,
    yes: confirm.Yes = False,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Delete finished jobs now, with their specs, events and request ids (admin).

    In batches of retention.batch_size, archived first when retention.archive_dir is set,
    as the background purge does. Fair-share usage is kept. A dry run counts the jobs
    first and the purge waits for a yes (--yes when stdin is not a terminal).
    """
    api = connect(url, token)
    body: dict[str, Any] = {"older_than_seconds": older_than, "dry_run": dry_run}
    if status:
        body["statuses"] = sorted({s.value for s in status})
    if not dry_run and not yes:
        would = call_api(api, "POST", "/jobs/purge", {**body, "dry_run": True})
        total = sum(would["jobs"].values())
        if total == 0:  # nothing to ask about
            show(would, purged_table)
            return
        counts = ", ".join(f"{name} {count:,}" for name, count in sorted(would["jobs"].items()) if count)
        finished = timestamp(would["finished_before"])
        confirm.confirm(f"delete {total:,} jobs ({counts}) that finished before {finished} UTC", yes=False)
    show(call_api(api, "POST", "/jobs/purge", body), purged_table)


def purged_table(document: dict) -> Table:
    verb = "would be deleted" if document["dry_run"] else "deleted"
    caption = f"finished before {timestamp(document['finished_before'])} UTC; {document['archived']} archived"
    table = new_table(f"Jobs {verb}", "status", "jobs", caption=caption)
    for name, count in sorted(document["jobs"].items()):
        table.add_row(name, str(count))
    return table
