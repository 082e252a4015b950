# SPDX-License-Identifier: GPL-3.0-or-later
"""`fairmatch-dirac import` / `export`: DIRAC's waiting jobs moved between DIRAC's own MySQL
TaskQueueDB and fairmatch, and back, as an operator runs the commands.

The jobs are put into the MySQL TaskQueueDB with DIRAC's ORIGINAL class
(FairmatchDIRAC.originalTaskQueueDB(), on the TaskQueueDB database ci/mariadb.py makes),
with requirement sets covering every field DIRAC's task queues keep (sites, banned sites,
grid CEs, platforms, job types, tags, RAM, CPU time), user priorities 1..10 and two groups.
The commands run as console scripts in subprocesses; their JSON summary is checked, then
both sides: what DIRAC's retrieveTaskQueues and tq_Jobs say before and after, and what
fairmatch holds under each JobID.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from FairmatchDIRAC.fields import LIST_FIELDS

pytestmark = pytest.mark.usefixtures("dirac")

COMMAND = str(Path(sys.executable).parent / "fairmatch-dirac")

# requirement sets: (owner, group, requirements beside Owner/OwnerGroup)
REQUIREMENTS = [
    ("alice", "user", {"CPUTime": 3600}),
    ("alice", "user", {"CPUTime": 200, "Sites": ["DIRAC.SiteA.ch", "DIRAC.SiteB.ch"]}),
    ("bob", "user", {"CPUTime": 86400, "BannedSites": ["DIRAC.Banned.ch", "DIRAC.Limited.ch"]}),
    ("bob", "user", {"CPUTime": 3600, "Platforms": ["x86_64-el9"]}),
    ("alice", "user", {"CPUTime": 40000, "Tags": ["GPU", "8Processors"]}),
    ("carol", "prod", {"CPUTime": 3600, "JobTypes": ["MCSimulation"]}),
    ("carol", "prod", {"CPUTime": 7200, "MinRAM": 2048, "MaxRAM": 4096}),
    ("carol", "prod", {"CPUTime": 500000, "MinRAM": 1024, "MaxRAM": 0, "GridCEs": ["ce1.siteb.ch"]}),
    (
        "carol",
        "prod",
        {
            "CPUTime": 100000,
            "Sites": ["DIRAC.SiteA.ch"],
            "BannedSites": ["DIRAC.Banned.ch"],
            "GridCEs": ["ce1.sitea.ch", "ce2.sitea.ch"],
            "Platforms": ["x86_64-el8", "x86_64-el9"],
            "JobTypes": ["User", "MCSimulation"],
            "Tags": ["MultiProcessor"],
            "MinRAM": 512,
            "MaxRAM": 8192,
        },
    ),
]
JOBS = 45  # five per requirement set
FIRST_JOB = 1001


def ok(result):
    assert result["OK"], result.get("Message")
    return result["Value"]


def planned_jobs() -> dict[int, tuple[dict, int]]:
    """{JobID: (tqDefDict, user priority)}: the sets in turn, the priorities 1..10 in turn."""
    jobs = {}
    for n in range(JOBS):
        owner, group, requirements = REQUIREMENTS[n % len(REQUIREMENTS)]
        jobs[FIRST_JOB + n] = ({"Owner": owner, "OwnerGroup": group, **requirements}, 1 + n % 10)
    return jobs


@pytest.fixture
def mysql_tqdb(dirac_databases):
    """DIRAC's original (MySQL) TaskQueueDB, on a TaskQueueDB database made empty again."""
    import FairmatchDIRAC

    return FairmatchDIRAC.originalTaskQueueDB()()


@pytest.fixture
def move(mysql_tqdb, fairmatch_clean):
    """The planned jobs waiting in the MySQL TaskQueueDB (put there by DIRAC's class), no job
    waiting in fairmatch (earlier tests' jobs are Killed: hence the counts below are of the
    Waiting ones, or taken before and after)."""
    for jid, (tq_def, priority) in planned_jobs().items():
        ok(mysql_tqdb.insertJob(jid, dict(tq_def), priority))
    return mysql_tqdb


def run(*args: str, check: bool = True) -> dict:
    """`fairmatch-dirac ARGS` as an operator runs it (DIRACSYSCONFIG and FAIRMATCH_URL are in the
    environment; --no-auth: this configuration names no Configuration Server); its JSON summary."""
    started = time.monotonic()
    done = subprocess.run(
        [COMMAND, *args, "--no-auth"], capture_output=True, text=True, env=dict(os.environ), timeout=300
    )
    where = f"fairmatch-dirac {' '.join(args)} (exit {done.returncode}):\n{done.stdout}\n{done.stderr}"
    if check:
        assert done.returncode == 0, where
    summary = json.loads(done.stdout)  # all the command writes to its standard output
    summary["exit"] = done.returncode
    summary["elapsed"] = time.monotonic() - started
    return summary


def _norm(tq: dict) -> tuple:
    """A task queue's requirements, comparable: lists sorted, RAM only when set, no counters."""
    items = [("Owner", tq["Owner"]), ("OwnerGroup", tq["OwnerGroup"]), ("CPUTime", int(tq["CPUTime"]))]
    for field in LIST_FIELDS:
        if tq.get(field):
            items.append((field, tuple(sorted(str(v) for v in tq[field]))))
    if tq.get("MinRAM") or tq.get("MaxRAM"):
        items.append(("RAM", (int(tq.get("MinRAM") or 0), int(tq.get("MaxRAM") or 0))))
    return tuple(items)


def mysql_state(mysql_tqdb) -> dict[int, tuple[tuple, int]]:
    """{JobID: (its task queue's requirements, its user priority)} from DIRAC's retrieveTaskQueues
    and tq_Jobs."""
    tqs = ok(mysql_tqdb.retrieveTaskQueues())
    rows = ok(mysql_tqdb._query("SELECT JobId, TQId, Priority FROM tq_Jobs"))
    return {int(jid): (_norm(tqs[tq_id]), int(priority)) for jid, tq_id, priority in rows}


def mysql_counts(mysql_tqdb) -> tuple[int, int]:
    """(rows of tq_Jobs, rows of tq_TaskQueues)"""
    jobs = ok(mysql_tqdb._query("SELECT COUNT(*) FROM tq_Jobs"))[0][0]
    tqs = ok(mysql_tqdb._query("SELECT COUNT(*) FROM tq_TaskQueues"))[0][0]
    return int(jobs), int(tqs)


def fairmatch_waiting(fairmatch) -> list[dict]:
    jobs, after = [], None
    while True:
        page = fairmatch.request("GET", f"/jobs?status=Waiting&limit=1000{f'&after={after}' if after else ''}")
        jobs += page["jobs"]
        after = page.get("next_cursor")
        if not after:
            return jobs


def killed(fairmatch, job_ids: set[int]) -> int:
    """How many Killed fairmatch jobs hold one of these JobIDs."""
    count, after = 0, None
    while True:
        page = fairmatch.request("GET", f"/jobs?status=Killed&limit=1000{f'&after={after}' if after else ''}")
        count += sum(1 for job in page["jobs"] if job["external_id"] and int(job["external_id"]) in job_ids)
        after = page.get("next_cursor")
        if not after:
            return count


def fairmatch_state(fairmatch) -> dict[int, tuple[tuple, int]]:
    """{JobID: (requirements, user priority)} of fairmatch's Waiting jobs, as DIRAC names them;
    a JobID held by two Waiting jobs fails here."""
    state = {}
    for job in fairmatch_waiting(fairmatch):
        jid = int(job["external_id"])
        assert jid not in state, f"JobID {jid} waits twice in fairmatch"
        tq = {"Owner": job["owner"], "OwnerGroup": job["owner_group"], "CPUTime": job["cpu_time"]}
        for field, name in LIST_FIELDS.items():
            tq[field] = job[name]
        tq["MinRAM"], tq["MaxRAM"] = job["min_ram_mb"], job["max_ram_mb"]
        state[jid] = (_norm(tq), int(job["user_priority"]))
    return state


def test_the_original_class_keeps_its_jobs_in_mysql(move):
    """The starting point is DIRAC's own: its class, its tables, its CPU segments."""
    from DIRAC.WorkloadManagementSystem.DB.TaskQueueDB import DIRACTaskQueueDB

    assert type(move) is DIRACTaskQueueDB
    state = mysql_state(move)
    assert sorted(state) == sorted(planned_jobs())
    assert len({tq for tq, _ in state.values()}) == len(REQUIREMENTS)
    assert {priority for _, priority in state.values()} == set(range(1, 11))


def test_import_then_export_moves_every_job_both_ways(move, fairmatch):
    before = mysql_state(move)
    tqs_before = {_norm(tq): tq["Jobs"] for tq in ok(move.retrieveTaskQueues()).values()}

    summary = run("import")
    assert summary["command"] == "import" and not summary["dry_run"]
    assert (summary["found"], summary["moved"], summary["failed"], summary["errors"]) == (JOBS, JOBS, 0, [])
    assert summary["task_queues"] == len(REQUIREMENTS)
    # every job waits in fairmatch under its JobID, with its requirements and user priority
    assert fairmatch_state(fairmatch) == before
    for jid in before:
        job = fairmatch.request("GET", f"/jobs/by-external-id/{jid}")
        assert job["status"] == "Waiting" and job["vo"] == "vo"
    # and is gone from MySQL, empty task queues too
    assert mysql_state(move) == {}
    assert mysql_counts(move) == (0, 0)

    summary = run("export")
    assert summary["command"] == "export"
    assert (summary["found"], summary["moved"], summary["failed"], summary["skipped"]) == (JOBS, JOBS, 0, 0)
    # all back in MySQL, same requirements, same priorities, same task queues
    assert mysql_state(move) == before
    assert {_norm(tq): tq["Jobs"] for tq in ok(move.retrieveTaskQueues()).values()} == tqs_before
    assert mysql_counts(move) == (JOBS, len(REQUIREMENTS))
    # none left waiting in fairmatch: each one withdrawn (Killed), none matched
    assert fairmatch_waiting(fairmatch) == []
    for jid in before:
        assert fairmatch.request("GET", f"/jobs/by-external-id/{jid}")["status"] == "Killed"
    # and DIRAC's own matching sees them again: a pilot at SiteA, el9, is offered their queues
    match = {"CPUTime": 200000, "Site": "DIRAC.SiteA.ch", "OwnerGroup": ["user", "prod"], "Platform": "x86_64-el9"}
    offered = ok(move.matchAndGetTaskQueue(match, numQueuesToGet=0))
    assert offered and {tq_id for tq_id, _, _ in offered} <= set(ok(move.retrieveTaskQueues()))


def test_dry_runs_change_nothing(move, fairmatch):
    before = mysql_state(move)
    summary = run("import", "--dry-run")
    assert summary["dry_run"] and (summary["found"], summary["moved"], summary["failed"]) == (JOBS, 0, 0)
    assert mysql_state(move) == before and fairmatch_waiting(fairmatch) == []

    run("import")
    moved = fairmatch_state(fairmatch)
    summary = run("export", "--dry-run")
    assert summary["dry_run"] and (summary["found"], summary["moved"], summary["failed"]) == (JOBS, 0, 0)
    assert fairmatch_state(fairmatch) == moved and mysql_counts(move) == (0, 0)


def test_an_import_run_again_after_an_interruption_loses_and_duplicates_nothing(move, fairmatch):
    """Interrupted after fairmatch took a batch, before MySQL let it go: those jobs are in both.
    Before that, another batch had gone all the way. A second run finishes the move."""
    from FairmatchDIRAC.WorkloadManagementSystem.DB.TaskQueueDB import TaskQueueDB

    before = mysql_state(move)
    tqs = ok(move.retrieveTaskQueues())
    rows = ok(move._query("SELECT JobId, TQId, Priority FROM tq_Jobs ORDER BY JobId"))
    extension = TaskQueueDB()
    for n, (jid, tq_id, priority) in enumerate(rows[: JOBS // 2]):
        tq = tqs[tq_id]
        tq_def = {k: v for k, v in tq.items() if k not in ("Priority", "Jobs")}
        ok(extension.insertJob(int(jid), tq_def, int(priority)))
        if n < 10:  # the first batch went all the way (DIRAC's deleteJob, without its delayed
            # task queue clean-up, which would run at this process's exit on a database long gone)
            assert ok(move._update("DELETE FROM tq_Jobs WHERE JobId = %s", args=(int(jid),))) == 1
    assert len(fairmatch_waiting(fairmatch)) == JOBS // 2
    assert mysql_counts(move)[0] == JOBS - 10
    killed_before = killed(fairmatch, {int(r[0]) for r in rows[10 : JOBS // 2]})

    summary = run("import")
    assert (summary["found"], summary["moved"], summary["failed"]) == (JOBS - 10, JOBS - 10, 0)
    assert fairmatch_state(fairmatch) == before
    assert mysql_counts(move) == (0, 0)
    # the jobs sent twice replaced their first copy (which ends Killed): one job each is Waiting
    twice = {int(r[0]) for r in rows[10 : JOBS // 2]}
    assert killed(fairmatch, twice) == killed_before + len(twice)

    # and once more: nothing left to move, nothing changes
    summary = run("import")
    assert (summary["found"], summary["moved"], summary["failed"]) == (0, 0, 0)
    assert fairmatch_state(fairmatch) == before


def test_an_export_run_again_after_an_interruption_loses_and_duplicates_nothing(move, fairmatch):
    before = mysql_state(move)
    run("import")
    # interrupted: half of the jobs made it into MySQL, the first ten of them also left fairmatch
    waiting = fairmatch_waiting(fairmatch)
    for n, job in enumerate(waiting[: JOBS // 2]):
        jid = int(job["external_id"])
        tq_def, priority = planned_jobs()[jid]
        ok(move.insertJob(jid, dict(tq_def), priority))
        if n < 10:
            fairmatch.request("DELETE", f"/jobs/by-external-id/{jid}")
    assert mysql_counts(move)[0] == JOBS // 2

    summary = run("export")
    assert (summary["found"], summary["moved"], summary["failed"]) == (JOBS - 10, JOBS - 10, 0)
    assert mysql_state(move) == before
    assert mysql_counts(move) == (JOBS, len(REQUIREMENTS))
    assert fairmatch_waiting(fairmatch) == []

    summary = run("export")
    assert (summary["found"], summary["moved"], summary["failed"]) == (0, 0, 0)
    assert mysql_state(move) == before


def test_a_killed_import_run_again_finishes_the_move(move, fairmatch):
    """A real interruption: the command killed once it has moved some of the jobs (batches of
    one, so that there is a moment to stop it in), then run again."""
    before = mysql_state(move)
    process = subprocess.Popen(
        [COMMAND, "import", "--batch", "1", "--no-auth"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=dict(os.environ),
    )
    try:
        deadline = time.monotonic() + 120
        while process.poll() is None and time.monotonic() < deadline:
            if len(fairmatch_waiting(fairmatch)) >= 5:
                break
            time.sleep(0.05)
        process.kill()
    finally:
        process.wait()
    left = mysql_counts(move)[0]
    assert 0 < left < JOBS, f"the command was not stopped midway ({left} jobs left in MySQL)"

    summary = run("import")
    assert summary["failed"] == 0 and summary["found"] == left
    assert fairmatch_state(fairmatch) == before
    assert mysql_counts(move) == (0, 0)


def test_help_says_what_the_commands_do():
    done = subprocess.run([COMMAND, "--help"], capture_output=True, text=True, check=True)
    for words in ("import ", "export ", "put into the target before", "running the same command again",
                  "FAIRMATCH_URL", "--dry-run only counts", "JSON summary"):  # fmt: skip
        assert words in " ".join(done.stdout.split()), words
    for command in ("import", "export"):
        text = subprocess.run([COMMAND, command, "--help"], capture_output=True, text=True, check=True).stdout
        for option in ("--dry-run", "--no-auth", "--url", "--token", "--verbose"):
            assert option in text
