"""Writing a workload straight into a migrated fairmatch PostgreSQL database.

The rows are what `POST /jobs` would have written (task queue with its value
lists, Waiting job with its spec, tq_jobs row; no submission events), streamed with COPY FROM
STDIN in one transaction, so a failed load leaves nothing behind.

Every table and column the loader writes is named in this module, so that a
schema change is followed here and nowhere else. Jobs spread over the
workload's user priorities (`Workload.user_priorities`): each run of jobs
written to one TQ is split over the levels (`LevelSplit`), `jobs.user_priority`
and `tq_jobs.user_priority` carry the level and `tq_jobs.real_priority` is the
service's own `real_priority` of it.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime

import psycopg
from psycopg import errors, sql
from psycopg.copy import QueuedLibpqWriter
from psycopg.types.json import Json
from sqlalchemy import ARRAY
from sqlalchemy.dialects import postgresql

from bench.workload_fit import apportion
from bench.workload_model import LevelSplit, Mix, Workload, priority_mix
from fairmatch.db.tables import task_queues
from fairmatch.db.taskqueues import INITIAL_PRIORITY
from fairmatch.jobs.lifecycle import JobStatus
from fairmatch.taskqueues.matching_fields import AMOUNT_FIELDS
from fairmatch.taskqueues.requirements import MULTI_VALUE_FIELDS, levels_of, real_priority, stored_levels

PRIORITY_CLASS = 0
# jobs reach a TQ in submissions of this size, interleaved across TQs, as
# productions and users submit them: a TQ's jobs are not one block of the heap
SUBMISSION = 1000
WRITE_BYTES = 4 << 20
# Writers (inserts, matches) wait until the load commits instead of
# interleaving with it; readers go on.
LOCK = "LOCK TABLE task_queues, jobs, job_specs, tq_jobs IN SHARE ROW EXCLUSIVE MODE"

Progress = Callable[[str], object]


def _skip_row_triggers(conn: psycopg.Connection) -> bool:
    """Leave out the per-row foreign-key triggers for this transaction: every
    tq_jobs row points at a job and a TQ written or locked by this very
    transaction, and the checks would cost several times the COPY itself.
    Needs a superuser; without one the checks simply run."""
    try:
        with conn.transaction():
            conn.execute("SET LOCAL session_replication_role = replica")
        return True
    except errors.InsufficientPrivilege:
        return False


def _connect(url: str) -> psycopg.Connection:
    # SQLAlchemy spellings are accepted too: the service's own URL works as is
    for driver in ("+psycopg", "+asyncpg", "+psycopg2"):
        url = url.replace(f"postgresql{driver}://", "postgresql://")
    return psycopg.connect(url)


def _text(value: object) -> str:
    """One field in COPY's text format."""
    if value is None:
        return r"\N"
    return str(value).replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


class _Meter:
    """Rows and rows/s of one table, on `progress` every few seconds."""

    def __init__(self, table: str, total: int, progress: Progress | None):
        self.table, self.total, self.progress = table, total, progress
        self.rows, self.started = 0, time.monotonic()
        self.shown = self.started

    def add(self, rows: int) -> None:
        self.rows += rows
        now = time.monotonic()
        if self.progress and now - self.shown >= 5:
            self.shown = now
            self.progress(f"{self.table}: {self.rows:,}/{self.total:,} rows, {self.rate():,.0f} rows/s")

    def rate(self) -> float:
        return self.rows / max(time.monotonic() - self.started, 1e-9)

    def seconds(self) -> float:
        return round(time.monotonic() - self.started, 3)


def _segments(counts: Sequence[int], first_id: int) -> Iterator[tuple[int, int, int]]:
    """(TQ index, first job id, n): round-robin submissions of up to SUBMISSION jobs."""
    left = list(counts)
    job_id = first_id
    while True:
        active = [i for i, n in enumerate(left) if n > 0]
        if not active:
            return
        for i in active:
            n = min(left[i], SUBMISSION)
            yield i, job_id, n
            job_id += n
            left[i] -= n


def _copy(table: str, columns: Sequence[str]) -> sql.Composed:
    return sql.SQL("COPY {} ({}) FROM STDIN").format(
        sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, columns))
    )


def _copy_rows(cur: psycopg.Cursor, table: str, columns: Sequence[str], rows: Iterator[tuple]) -> int:
    n = 0
    with cur.copy(_copy(table, columns)) as copy:
        for row in rows:
            copy.write_row(row)
            n += 1
    return n


def _create_task_queues(
    cur: psycopg.Cursor, workload: Workload, indices: Sequence[int], first_id: int, now: datetime,
    levels: Mapping[int, Counter[int]],
) -> dict[int, int]:  # fmt: skip
    """TQ rows, value lists included; workload index -> TQ id.
    `levels`: the jobs about to be written per TQ index and user priority."""
    ids = {i: first_id + k for k, i in enumerate(indices)}
    # the value lists as the service writes them: arrays, or JSON lists
    lists = [(f, isinstance(task_queues.c[f].type.dialect_impl(postgresql.dialect()), ARRAY))
             for f in MULTI_VALUE_FIELDS if f in task_queues.c]  # fmt: skip
    changed = cur.execute("SELECT clock_timestamp()").fetchone()[0]
    columns = ("id", "requirements_hash", "owner", "owner_group", "account", "vo", "cpu_time", "priority_class",
               "job_class", *AMOUNT_FIELDS, "priority", "priority_origin", "created_at",
               *(f for f, _ in lists), "levels", "changed_at")  # fmt: skip
    reqs = workload.requirements

    _copy_rows(cur, "task_queues", columns, (
        (ids[i], workload.hashes[i], reqs[i].owner, reqs[i].owner_group, reqs[i].account, reqs[i].vo,
         reqs[i].cpu_time,
         reqs[i].priority_class, reqs[i].job_class, *(reqs[i].amount(f) for f in AMOUNT_FIELDS), INITIAL_PRIORITY,
         None, now,
         *(list(reqs[i].values(f)) if array else Json(list(reqs[i].values(f))) for f, array in lists),
         Json(_stored_levels(levels.get(i, Counter()))), changed)
        for i in indices
    ))  # fmt: skip
    _advance(cur, "task_queues", first_id + len(indices) - 1)
    return ids


def _stored_levels(jobs: Mapping[int, int], stored: Sequence[Sequence[float]] = ()) -> list[list[float]]:
    """`task_queues.levels` with the jobs of `jobs` (per user priority) added, as a submission adds them."""
    merged = levels_of(stored)
    for user_priority, n in jobs.items():
        level = real_priority(user_priority)
        merged[level] = merged.get(level, 0) + n
    return stored_levels(merged)


def _add_levels(cur: psycopg.Cursor, added: Mapping[int, Counter[int]]) -> None:
    """Existing TQs (by id) that gained jobs (per user priority): their level
    counts grow and their row is marked changed, as a submission does."""
    if not added:
        return
    cur.execute("SELECT id, levels FROM task_queues WHERE id = ANY(%s)", (list(added),))
    rows = [(Json(_stored_levels(added[tq], stored or ())), tq) for tq, stored in cur.fetchall()]
    cur.executemany("UPDATE task_queues SET levels = %s, changed_at = clock_timestamp() WHERE id = %s", rows)


Run = tuple[int, int, int, int]  # (TQ index, first job id, jobs, user priority)


def _runs(counts: Sequence[int], first_id: int, mix: Mix) -> list[Run]:
    """The jobs to write, in id order: round-robin submissions per TQ, each
    split over the user priorities of `mix` (a block of ids per level)."""
    split = LevelSplit(mix)
    runs = []
    for i, start, n in _segments(counts, first_id):
        for user_priority, k in split.split(n):
            runs.append((i, start, k, user_priority))
            start += k
    return runs


def _levels(runs: Sequence[Run]) -> dict[int, Counter[int]]:
    """TQ index -> jobs per user priority."""
    levels: dict[int, Counter[int]] = {}
    for i, _, n, user_priority in runs:
        levels.setdefault(i, Counter())[user_priority] += n
    return levels


def _copy_jobs(
    cur: psycopg.Cursor, workload: Workload, tq_ids: dict[int, int], runs: Sequence[Run],
    now: datetime, progress: Progress | None,
) -> dict:  # fmt: skip
    """The Waiting jobs, their specs, then their tq_jobs rows; seconds and rows/s of each, and
    jobs per user priority."""
    total = sum(n for _, _, n, _ in runs)
    stamp = now.isoformat()
    priorities = sorted({p for *_, p in runs})
    # everything after the job id is the same for every job of a TQ and level
    job_tail, spec_tail, queue_tail = {}, {}, {}
    for i, tq_id in tq_ids.items():
        spec, req = workload.specs[i], workload.requirements[i]
        head = (JobStatus.Waiting.value, req.owner, req.owner_group, req.vo, req.owner_group, spec["cpu_time"])
        requirements = (json.dumps(req.to_json()), None)  # no payload
        for p in priorities:
            fields = (*head, p, PRIORITY_CLASS, tq_id, stamp)
            job_tail[i, p] = ("\t" + "\t".join(map(_text, fields)) + "\n").encode()
            spec_tail[i, p] = ("\t" + "\t".join(map(_text, requirements)) + "\n").encode()
            queue_tail[i, p] = f"\t{tq_id}\t{p}\t{real_priority(p)!r}\n".encode()
    report = {}
    for table, columns, tails in (
        ("jobs", ("id", "status", "owner", "owner_group", "vo", "account", "cpu_time", "user_priority",
                  "priority_class", "task_queue_id", "submitted_at"), job_tail),
        ("job_specs", ("job_id", "requirements", "payload"), spec_tail),
        ("tq_jobs", ("job_id", "tq_id", "user_priority", "real_priority"), queue_tail),
    ):  # fmt: skip
        meter = _Meter(table, total, progress)
        # a writer thread sends while the next rows are made
        with cur.copy(_copy(table, columns), writer=QueuedLibpqWriter(cur)) as copy:
            chunk: list[bytes] = []
            size = 0
            for i, start, n, p in runs:
                tail = tails[i, p]
                chunk.append(b"".join([b"%d%s" % (job_id, tail) for job_id in range(start, start + n)]))
                size += len(chunk[-1])
                if size >= WRITE_BYTES:
                    copy.write(b"".join(chunk))
                    chunk, size = [], 0
                meter.add(n)
            if chunk:
                copy.write(b"".join(chunk))
        report[f"{table}_seconds"] = meter.seconds()
        report[f"{table}_rows_per_second"] = round(meter.rate())
    if runs:
        _advance(cur, "jobs", max(start + n for _, start, n, _ in runs) - 1)
    report["user_priorities"] = {str(p): sum(n for *_, n, q in runs if q == p) for p in priorities}
    return report


def top_up_mix(mix: Mix, waiting: Mapping[int, int], total_jobs: int) -> Mix:
    """The mix of the jobs a top-up adds so that the `total_jobs` waiting after
    it follow `mix` again: matching drains the levels unevenly (higher ones
    first), so each level gets what it lacks. Levels outside the mix are left
    alone; when none lacks anything (the added jobs are too few to matter), `mix`."""
    owed = {p: share * total_jobs - waiting.get(p, 0) for p, share in mix}
    lacking = {p: n for p, n in owed.items() if n > 0}
    return priority_mix(lacking) if lacking else mix


def _next_id(cur: psycopg.Cursor, table: str) -> int:
    """Past both the table's largest id and its sequence."""
    cur.execute(
        sql.SQL(
            "SELECT GREATEST((SELECT COALESCE(max(id), 0) FROM {t}),"
            " COALESCE(pg_sequence_last_value(pg_get_serial_sequence(%s, 'id')::regclass), 0)) + 1"
        ).format(t=sql.Identifier(table)),
        (table,),
    )
    return cur.fetchone()[0]


def _advance(cur: psycopg.Cursor, table: str, last_id: int) -> None:
    """Move the id sequence to the last id written (it was below: see _next_id)."""
    cur.execute("SELECT setval(pg_get_serial_sequence(%s, 'id'), %s)", (table, last_id))


def _finish(conn: psycopg.Connection, report: dict, started: float, progress: Progress | None, analyze: bool) -> dict:
    """With `analyze`, after a bulk load: a site's autoanalyze would analyse the
    tables within a minute of it; a top-up that replaces what a run consumed
    is left to autoanalyze, as a site's submissions are."""
    if analyze:
        begun = time.monotonic()
        conn.execute("ANALYZE")
        report["analyze_seconds"] = round(time.monotonic() - begun, 3)
    report["seconds"] = round(time.monotonic() - started, 3)
    if progress:
        jobs, tqs, seconds = report["jobs"], report["task_queues"], report["seconds"]
        progress(f"wrote {jobs:,} jobs and {tqs:,} new TQs in {seconds:.1f} s")
    return report


def load(url: str, workload: Workload, *, progress: Progress | None = print) -> dict:
    """Write the workload into an empty, migrated database. Returns row counts and seconds."""
    started = time.monotonic()
    now = datetime.now(UTC)
    with _connect(url) as conn:
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(LOCK)
            checked = not _skip_row_triggers(conn)
            cur.execute("SELECT EXISTS (SELECT FROM task_queues) OR EXISTS (SELECT FROM jobs)")
            if cur.fetchone()[0]:
                raise ValueError("the database already holds task queues or jobs; load wants an empty one")
            runs = _runs(workload.jobs, _next_id(cur, "jobs"), workload.user_priorities)
            indices = range(len(workload.requirements))
            tq_ids = _create_task_queues(cur, workload, indices, _next_id(cur, "task_queues"), now, _levels(runs))
            report = {"workload": workload.name, "task_queues": len(tq_ids), "jobs": workload.total_jobs,
                      "foreign_key_checks": checked}  # fmt: skip
            report |= _copy_jobs(cur, workload, tq_ids, runs, now, progress)
        return _finish(conn, report, started, progress, analyze=True)


def top_up(url: str, workload: Workload, total_jobs: int, *, progress: Progress | None = print) -> dict:
    """Add Waiting jobs to the workload's TQs, in proportion to its sizes, until
    `total_jobs` jobs wait, the levels brought back to the workload's mix
    (`top_up_mix`). TQs drained and deleted since are created again."""
    started = time.monotonic()
    now = datetime.now(UTC)
    with _connect(url) as conn:
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(LOCK)
            checked = not _skip_row_triggers(conn)
            cur.execute("SELECT user_priority, count(*) FROM tq_jobs GROUP BY user_priority")
            by_level = dict(cur.fetchall())
            waiting = sum(by_level.values())
            report = {"workload": workload.name, "waiting_before": waiting, "task_queues": 0,
                      "foreign_key_checks": checked}  # fmt: skip
            add = total_jobs - waiting
            if add <= 0:
                return {**report, "jobs": 0, "seconds": round(time.monotonic() - started, 3)}
            mix = top_up_mix(workload.user_priorities, by_level, total_jobs)
            runs = _runs(apportion(workload.jobs, add), _next_id(cur, "jobs"), mix)
            levels = _levels(runs)
            cur.execute(
                "SELECT requirements_hash, id FROM task_queues WHERE requirements_hash = ANY(%s)",
                (list(workload.hashes),),
            )
            found = dict(cur.fetchall())
            tq_ids = {i: found[h] for i, h in enumerate(workload.hashes) if h in found}
            _add_levels(cur, {tq_ids[i]: n for i, n in levels.items() if i in tq_ids})
            missing = [i for i, h in enumerate(workload.hashes) if h not in found]
            if missing:
                created = _create_task_queues(cur, workload, missing, _next_id(cur, "task_queues"), now, levels)
                tq_ids |= created
                report["task_queues"] = len(created)
            report["jobs"] = add
            report |= _copy_jobs(cur, workload, tq_ids, runs, now, progress)
        # a bulk load when it at least doubles the queue (scaling's and diracx's next sizes)
        return _finish(conn, report, started, progress, analyze=add >= waiting)
