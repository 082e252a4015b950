# SPDX-License-Identifier: GPL-3.0-or-later
"""``fairmatch-dirac``: move DIRAC's waiting jobs between its MySQL TaskQueueDB and fairmatch.

The text of ``HELP`` below is what ``fairmatch-dirac --help`` prints.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from FairmatchDIRAC.fields import LIST_FIELDS

BATCH = 500
PAGE = 1000
MAX_ERRORS_SHOWN = 20


HELP = """\
Move DIRAC's waiting jobs between DIRAC's own MySQL TaskQueueDB and fairmatch, to switch a
DIRAC installation to the FairmatchDIRAC extension (import) or back (export).

  import   every job waiting in the MySQL TaskQueueDB (its tq_Jobs) goes to fairmatch, as a
           Waiting job whose external id is the DIRAC JobID, with its task queue's
           requirements (owner, group, CPU time, sites, banned sites, grid CEs, platforms,
           job types, tags, RAM) and its user priority; once fairmatch holds it, it is
           deleted from MySQL. The task queues left empty are deleted.
  export   every Waiting fairmatch job whose external id is a DIRAC JobID goes back into
           the MySQL TaskQueueDB with the same requirements and user priority; once MySQL
           holds it, it is withdrawn from fairmatch (it ends Killed there). Jobs without a
           numeric external id are not DIRAC's: they are counted as skipped and stay.

A job is always put into the target before it is taken out of the source, so none is lost
if the command stops midway (killed, a service down): the jobs then found in both are
harmless (DIRAC's insertJob replaces a JobID's entry, fairmatch replaces the Waiting job
holding an external id) and running the same command again finishes the move. A job matched
from the source while it is being moved is taken back out of the target, so it never runs
twice. For a clean cut-over, stop DIRAC's Matcher and optimizers while it runs.

It needs DIRAC's configuration (the MySQL settings of the TaskQueueDB's section,
/Systems/WorkloadManagement/Databases/TaskQueueDB) and fairmatch's address: --url, else
FAIRMATCH_URL, else that section's FairmatchURL option (token: --token, FAIRMATCH_TOKEN,
FairmatchToken). --dry-run only counts. The JSON summary (found, moved, already_gone,
skipped, failed, errors, seconds) is all that goes to standard output; progress and DIRAC's
log go to standard error. Exit status 0 when no job failed, 1 otherwise.
"""


class Summary:
    def __init__(self, command, dryRun):
        self.data = {
            "command": command,
            "dry_run": dryRun,
            "found": 0,
            "moved": 0,
            "already_gone": 0,
            "skipped": 0,
            "failed": 0,
            "errors": [],
        }
        self.started = time.monotonic()

    def error(self, message):
        self.data["failed"] += 1
        if len(self.data["errors"]) < MAX_ERRORS_SHOWN:
            self.data["errors"].append(message)
        print(f"error: {message}", file=sys.stderr)

    def progress(self, force=False):
        done = self.data["moved"] + self.data["already_gone"] + self.data["skipped"] + self.data["failed"]
        if force or done % 1000 == 0:
            print(
                f"{self.data['command']}: {done}/{self.data['found']} handled, {self.data['moved']} moved, "
                f"{self.data['failed']} failed",
                file=sys.stderr,
            )

    def dump(self):
        self.data["seconds"] = round(time.monotonic() - self.started, 1)
        print(json.dumps(self.data, indent=2, sort_keys=True), file=_summaryOut or sys.stdout, flush=True)


#: where the JSON summary goes: the standard output as it was before DIRAC's log was sent
#: to the standard error
_summaryOut = None


def _stdoutForTheSummaryOnly():
    """Standard output keeps only the summary: file descriptor 1 becomes the standard error
    (DIRAC's log handlers write to whatever sys.stdout was when DIRAC was imported, and to
    the descriptor), and the summary goes to a copy of the original descriptor."""
    global _summaryOut
    sys.stdout.flush()
    try:
        _summaryOut = os.fdopen(os.dup(1), "w")
        os.dup2(2, 1)
    except OSError:  # no usable descriptors: leave things as they are
        _summaryOut = None


def _initialize(args):
    if args.url:
        os.environ["FAIRMATCH_URL"] = args.url
    if args.token:
        os.environ["FAIRMATCH_TOKEN"] = args.token
    import DIRAC

    kwargs = {}
    if args.host_credentials:
        kwargs["host_credentials"] = True
    if args.no_auth:
        kwargs["require_auth"] = False
    if not args.verbose:
        from DIRAC.FrameworkSystem.private.standardLogging.LogLevels import LogLevel

        kwargs["log_level"] = LogLevel.WARN
    DIRAC.initialize(**kwargs)


def _databases():
    """(DIRAC's MySQL TaskQueueDB, fairmatch's TaskQueueDB)"""
    from FairmatchDIRAC import originalTaskQueueDB
    from FairmatchDIRAC.WorkloadManagementSystem.DB.TaskQueueDB import TaskQueueDB

    return originalTaskQueueDB()(), TaskQueueDB()


def _value(result, what):
    if not result["OK"]:
        raise SystemExit(f"fairmatch-dirac: {what}: {result['Message']}")
    return result["Value"]


def _definition(tq):
    """A task queue definition (DIRAC's tqDefDict) from retrieveTaskQueues' description."""
    tqDef = {"Owner": tq["Owner"], "OwnerGroup": tq["OwnerGroup"], "CPUTime": int(tq["CPUTime"])}
    for field in LIST_FIELDS:
        if tq.get(field):
            tqDef[field] = [str(v) for v in tq[field]]
    if tq.get("MinRAM") or tq.get("MaxRAM"):
        tqDef["MinRAM"] = int(tq.get("MinRAM") or 0)
        tqDef["MaxRAM"] = int(tq.get("MaxRAM") or 0)
    return tqDef


def importJobs(args):
    """MySQL TaskQueueDB -> fairmatch."""
    summary = Summary("import", args.dry_run)
    mysql, fairmatch = _databases()
    tqs = _value(mysql.retrieveTaskQueues(), "reading the MySQL task queues")
    rows = _value(mysql._query("SELECT JobId, TQId, Priority FROM tq_Jobs ORDER BY JobId"), "reading tq_Jobs")
    summary.data["found"] = len(rows)
    summary.data["task_queues"] = len(tqs)
    print(f"import: {len(rows)} waiting jobs in {len(tqs)} MySQL task queues", file=sys.stderr)
    if args.dry_run:
        summary.dump()
        return 0

    batch = []
    for jobId, tqId, priority in rows:
        tq = tqs.get(tqId)
        if tq is None:  # its TQ went away meanwhile: matched or deleted
            summary.data["already_gone"] += 1
            continue
        batch.append((int(jobId), _definition(tq), int(priority)))
        if len(batch) >= min(max(args.batch, 1), 10_000):
            _importBatch(batch, mysql, fairmatch, summary)
            batch = []
    if batch:
        _importBatch(batch, mysql, fairmatch, summary)
    result = mysql.cleanOrphanedTaskQueues()
    if not result["OK"]:
        print(f"warning: could not delete the emptied MySQL task queues: {result['Message']}", file=sys.stderr)
    summary.progress(force=True)
    summary.dump()
    return 1 if summary.data["failed"] else 0


def _importBatch(batch, mysql, fairmatch, summary):
    specs = []
    for jobId, tqDef, priority in batch:
        try:
            specs.append(fairmatch._jobSpec(jobId, tqDef, priority))
        except Exception as exc:
            specs = None
            summary.error(f"job {jobId}: bad definition {tqDef}: {exc!r}")
            break
    inserted = set()
    result = fairmatch._call("POST", "/jobs", json={"jobs": specs}, expect=(200, 201)) if specs else None
    if result is not None and result["OK"]:
        inserted = {int(j["external_id"]) for j in (result["Value"][1] or {}).get("jobs", []) if j.get("external_id")}
    else:
        # one bad job refuses the whole batch: one by one, to insert the others
        for jobId, tqDef, priority in batch:
            one = fairmatch.insertJob(jobId, tqDef, priority, skipTQDefCheck=True)
            if one["OK"]:
                inserted.add(jobId)
            else:
                summary.error(f"job {jobId}: not inserted into fairmatch: {one['Message']}")
    for jobId, _, _ in batch:
        if jobId not in inserted:
            continue
        removed = mysql.deleteJob(jobId)
        if not removed["OK"]:
            summary.error(f"job {jobId}: in fairmatch, but still in MySQL (a re-run removes it): {removed['Message']}")
        elif removed["Value"]:
            summary.data["moved"] += 1
        else:
            # matched from MySQL meanwhile: it must not run twice
            withdrawn = fairmatch.deleteJob(jobId)
            if not withdrawn["OK"]:
                summary.error(f"job {jobId}: matched from MySQL meanwhile, still in fairmatch: {withdrawn['Message']}")
            else:
                summary.data["already_gone"] += 1
        summary.progress()


def _waitingFairmatchJobs(fairmatch):
    """Pages of Waiting fairmatch jobs, oldest first."""
    after = None
    while True:
        params = {"status": "Waiting", "limit": PAGE}
        if after:
            params["after"] = after
        page = _value(fairmatch._call("GET", "/jobs", params=params), "listing fairmatch's waiting jobs")[1] or {}
        yield page.get("jobs", [])
        after = page.get("next_cursor")
        if not after:
            return


def _definitionOfJob(job):
    tqDef = {"Owner": job["owner"], "OwnerGroup": job["owner_group"], "CPUTime": int(job.get("cpu_time") or 0)}
    for field, name in LIST_FIELDS.items():
        if job.get(name):
            tqDef[field] = list(job[name])
    if job.get("min_ram_mb") or job.get("max_ram_mb"):
        tqDef["MinRAM"] = int(job.get("min_ram_mb") or 0)
        tqDef["MaxRAM"] = int(job.get("max_ram_mb") or 0)
    return tqDef


def exportJobs(args):
    """fairmatch -> MySQL TaskQueueDB."""
    from FairmatchDIRAC.api import segment

    summary = Summary("export", args.dry_run)
    mysql, fairmatch = _databases()
    for jobs in _waitingFairmatchJobs(fairmatch):
        for job in jobs:
            summary.data["found"] += 1
            externalId = job.get("external_id")
            try:
                jobId = int(externalId)
            except (TypeError, ValueError):
                summary.data["skipped"] += 1  # not a DIRAC job
                continue
            if args.dry_run:
                continue
            inserted = mysql.insertJob(jobId, _definitionOfJob(job), int(job.get("user_priority", 1)))
            if not inserted["OK"]:
                summary.error(f"job {jobId}: not inserted into MySQL: {inserted['Message']}")
                continue
            result = fairmatch._call("DELETE", f"/jobs/by-external-id/{segment(jobId)}", expect=(200, 204, 404, 409))
            if not result["OK"]:
                summary.error(
                    f"job {jobId}: in MySQL, but still in fairmatch (a re-run removes it): {result['Message']}"
                )
            elif result["Value"][0] in (200, 204):
                summary.data["moved"] += 1
            else:
                # matched from fairmatch meanwhile: it must not run twice
                removed = mysql.deleteJob(jobId)
                if not removed["OK"]:
                    summary.error(
                        f"job {jobId}: matched from fairmatch meanwhile, still in MySQL: {removed['Message']}"
                    )
                else:
                    summary.data["already_gone"] += 1
            summary.progress()
    summary.progress(force=True)
    summary.dump()
    return 1 if summary.data["failed"] else 0


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="fairmatch-dirac",
        description=HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="{import,export}")
    for name, func, text in (
        (
            "import",
            importJobs,
            "MySQL TaskQueueDB -> fairmatch: each waiting job into fairmatch (external id = JobID, same "
            "requirements and user priority), then out of MySQL.",
        ),
        (
            "export",
            exportJobs,
            "fairmatch -> MySQL TaskQueueDB: each Waiting fairmatch job with a DIRAC JobID as external id "
            "into MySQL (same requirements and user priority), then withdrawn from fairmatch.",
        ),
    ):
        p = sub.add_parser(
            name,
            help=text,
            description=f"{text} Safe to run again after an interruption: a job is put into the target "
            "before it leaves the source. Its JSON summary is all it writes to standard output; exit status 1 "
            "when a job failed to move.",
        )
        p.add_argument("--dry-run", action="store_true", help="only count the jobs that would move")
        p.add_argument(
            "--url", help="fairmatch's address (default: FAIRMATCH_URL, else the TaskQueueDB's FairmatchURL option)"
        )
        p.add_argument(
            "--token", help="fairmatch's token (default: FAIRMATCH_TOKEN, else the TaskQueueDB's FairmatchToken option)"
        )
        p.add_argument("--host-credentials", action="store_true", help="use the host certificate for DIRAC")
        p.add_argument(
            "--no-auth",
            action="store_true",
            help="read DIRAC's local configuration only (DIRACSYSCONFIG, etc/dirac.cfg): no Configuration Server",
        )
        p.add_argument("--verbose", action="store_true", help="DIRAC's log at INFO level (default: warnings only)")
        if name == "import":
            p.add_argument("--batch", type=int, default=BATCH, help=f"jobs per POST /jobs (default {BATCH})")
        p.set_defaults(func=func)
    args = parser.parse_args(argv)
    _stdoutForTheSummaryOnly()
    _initialize(args)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
