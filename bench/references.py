"""Reference points measured with pgbench on the PostgreSQL that serves fairmatch.

`bare_claim` is the physical limit of a durable queue on this machine: one
autocommitted `DELETE … WHERE id = (SELECT … FOR UPDATE SKIP LOCKED LIMIT 1)`
per transaction on a plain table (`bench_queue`) as long as the fairmatch
queue under test, with no HTTP, no matching and no bookkeeping.

`legacy_dirac` is DIRAC's TaskQueueDB.matchAndGetJob transcribed onto
fairmatch's tables, which mirror DIRAC's (task_queues ~ tq_TaskQueues,
tq_jobs ~ tq_Jobs); DIRAC's one table per multi-valued requirement (tq_TQTo*)
is built for the run from the task queues' value lists (bench_tq_sites,
bench_tq_banned_sites, ...). Script: references/legacy_dirac.sql. Transcribed:

- the queue draw: one SELECT over task_queues with `cpu_time <= CPUTime`,
  per multi-valued requirement "the queue lists no value, or lists one of the
  pilot's" as NOT EXISTS / IN subqueries on the value tables, the pilot's
  site NOT IN the banned sites, the queue has jobs, `ORDER BY random() /
  priority LIMIT 1` (DIRAC: RAND()/Priority);
- the job draw: `SELECT job_id FROM tq_jobs WHERE tq_id = … ORDER BY random()
  LIMIT 1`;
- the claim: `DELETE FROM tq_jobs WHERE job_id = …`, whose affected-row count
  says whether this pilot won the job, then `UPDATE jobs SET status =
  'Matched'`. Every statement autocommits and nothing is locked, so two
  pilots can draw the same job; the second DELETE then finds nothing.

What differs:

- no retries: DIRAC tries further candidate jobs when a DELETE finds nothing,
  and further queues when one has run dry. Here such a transaction ends
  without a match and is counted (`delete_found_nothing`, `queue_emptied`):
  the number of retries DIRAC would have made;
- a pilot without Platform or JobType puts no condition on that field (as
  DIRAC does, see docs/explanation/dirac.md);
  GridCE is never a condition, and queues with tags are left out (the pilots
  offer none); owner, group, VO, RAM and processors are not transcribed;
- the job draw is uniform; fairmatch draws a user-priority level first. There
  are no priority classes (fairmatch serves the highest class first), and
  queues left empty are not deleted;
- only the job's status changes; fairmatch's claim also records site, pilot,
  lease, an event and the request id;
- PostgreSQL instead of MariaDB, and no RPC or HTTP layer: it measures the
  SQL alone, like DIRAC's TaskQueueDB called directly.

Both runs change the database: bare_claim creates and drops `bench_queue`,
legacy_dirac its pilot and value tables; legacy_dirac matches waiting jobs of the fairmatch database (they become
Matched, as in a fairmatch run) and counts its matches from tq_jobs before
and after, so nothing else may write to the database meanwhile.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path

import psycopg

SCRIPTS = Path(__file__).with_name("references")


def libpq_url(url: str) -> str:
    """postgresql+psycopg://… (SQLAlchemy) → postgresql://… (libpq, pgbench)."""
    return re.sub(r"^postgres(ql)?\+\w+://", "postgresql://", url)


_FIELDS = {
    "clients": (r"^number of clients: (\d+)", int),
    "threads": (r"^number of threads: (\d+)", int),
    "transactions": (r"^number of transactions actually processed: (\d+)", int),
    "failed": (r"^number of failed transactions: (\d+)", int),
    "latency_mean_ms": (r"^latency average = ([\d.]+) ms", float),
    "latency_stddev_ms": (r"^latency stddev = ([\d.]+) ms", float),
    # PostgreSQL ≥ 14 prints "without initial connection time", older ones "excluding …"
    "tps": (r"^tps = ([\d.]+) \((?:without initial connection time|excluding connections establishing)\)", float),
}


def parse_pgbench(stdout: str) -> dict:
    """tps, transactions and mean latency from pgbench's report."""
    result: dict = {}
    for key, (pattern, kind) in _FIELDS.items():
        found = re.search(pattern, stdout, re.MULTILINE)
        if found:
            result[key] = kind(found.group(1))
    if "tps" not in result or "transactions" not in result:
        raise ValueError(f"not a pgbench report:\n{stdout}")
    result.setdefault("failed", 0)
    return result


def log_latencies_ms(directory: Path) -> list[float]:
    """Per-transaction latencies from `pgbench -l` logs (3rd field, µs; failed/skipped left out)."""
    latencies = []
    for log in directory.iterdir():
        for line in log.read_text().splitlines():
            fields = line.split()
            if len(fields) >= 3 and fields[2].isdigit():
                latencies.append(int(fields[2]) / 1000)
    return latencies


def percentiles(values: list[float]) -> dict:
    """Nearest-rank p50, p90, p99, p99.9 and max."""
    if not values:
        return {}
    ordered = sorted(values)
    at = {f"p{p:g}": ordered[max(0, math.ceil(round(p / 100 * len(ordered), 6)) - 1)] for p in (50, 90, 99, 99.9)}
    return {**at, "max": ordered[-1]}


def pgbench(url: str, script: Path, clients: int, seconds: int, variables: dict | None = None) -> dict:
    """Run a pgbench custom script: -n (no vacuum of pgbench's own tables), prepared statements."""
    binary = shutil.which("pgbench")
    if binary is None:
        raise FileNotFoundError("pgbench is not installed (Debian/Ubuntu: apt-get install postgresql-client)")
    with tempfile.TemporaryDirectory() as logs:
        command = [
            binary, "-n", "-M", "prepared", "-c", str(clients), "-j", str(min(2, clients)),
            "-T", str(seconds), "-f", str(script), "-l", f"--log-prefix={logs}/tx",
            *(f"-D{k}={v}" for k, v in (variables or {}).items()), libpq_url(url),
        ]  # fmt: skip
        done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=seconds + 120)
        if done.returncode != 0:
            raise RuntimeError(f"pgbench failed (exit {done.returncode}):\n{done.stderr}{done.stdout}")
        result = parse_pgbench(done.stdout)
        tail = percentiles(log_latencies_ms(Path(logs)))
        result["latency_ms"] = {"mean": result.pop("latency_mean_ms", None), **tail}
    result["duration_s"] = result["transactions"] / result["tps"] if result["tps"] else float(seconds)
    return result


def bare_claim(url: str, rows: int, clients: int, seconds: int) -> dict:
    """The bare durable claim on a fresh `rows`-row table; pgbench's tps is claims/s.

    The table is refilled on every call and dropped after; `ran_dry` says
    whether it emptied during the run (then `rows` was too small).
    """
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_queue")
        conn.execute("CREATE TABLE bench_queue (id bigserial, tq_id int, payload text)")
        # explicit ids and the key built afterwards: far quicker than nextval and index upkeep per row
        conn.execute(
            "INSERT INTO bench_queue (id, tq_id, payload)"
            " SELECT g, g %% 500, md5(g::text) FROM generate_series(1, %s) AS g",
            [rows],
        )
        conn.execute("ALTER TABLE bench_queue ADD PRIMARY KEY (id)")
        conn.execute("SELECT setval(pg_get_serial_sequence('bench_queue', 'id'), %s)", [max(rows, 1)])
        conn.execute("VACUUM ANALYZE bench_queue")
        synchronous_commit = conn.execute("SHOW synchronous_commit").fetchone()[0]
    try:
        result = pgbench(url, SCRIPTS / "bare_claim.sql", clients, seconds)
        with psycopg.connect(libpq_url(url)) as conn:
            remaining = conn.execute("SELECT count(*) FROM bench_queue").fetchone()[0]
    finally:
        with psycopg.connect(libpq_url(url), autocommit=True) as conn:
            conn.execute("DROP TABLE IF EXISTS bench_queue")
    return {
        **result,
        "claims_per_s": result["tps"],
        "rows": rows,
        "remaining_rows": remaining,
        "ran_dry": remaining == 0,
        "synchronous_commit": synchronous_commit,
    }


def _values(given) -> list[str] | None:
    """A pilot's list field: None (or `any`) means no condition, as in DIRAC."""
    if given is None:
        return None
    items = [given] if isinstance(given, str) else list(given)
    return None if any(v.lower() == "any" for v in items) else items


def pilot_rows(pilots: Iterable[dict]) -> list[tuple]:
    """(id, site, cpu_time, platforms, job_types) from DIRAC-keyed (or snake_case) descriptions."""
    return [
        (
            i,
            p.get("Site", p.get("site")),
            int(p.get("CPUTime", p.get("cpu_time"))),
            _values(p.get("Platform", p.get("platform"))),
            _values(p.get("JobType", p.get("job_type"))),
        )
        for i, p in enumerate(pilots, start=1)
    ]


def _read_pilots(pilots: Iterable[dict] | str | Path) -> list[dict]:
    if isinstance(pilots, (str, Path)):
        return [json.loads(line) for line in Path(pilots).read_text().splitlines() if line.strip()]
    return list(pilots)


# DIRAC's tq_TQTo* tables: one per multi-valued requirement the script tests
VALUE_TABLES = {field: f"bench_tq_{field}" for field in ("sites", "banned_sites", "platforms", "job_types", "tags")}
BENCH_TABLES = ", ".join(("bench_pilots", "bench_lost_races", *VALUE_TABLES.values()))


def _create_value_tables(conn: psycopg.Connection) -> None:
    """DIRAC's layout of the value lists: (tq_id, value) rows, as indexed as DIRAC's."""
    for field, table in VALUE_TABLES.items():
        conn.execute(f"CREATE TABLE {table} (tq_id bigint NOT NULL, value text NOT NULL, PRIMARY KEY (tq_id, value))")
        conn.execute(f"INSERT INTO {table} SELECT DISTINCT id, unnest({field}) FROM task_queues")
        conn.execute(f"CREATE INDEX ON {table} (value)")
        conn.execute(f"ANALYZE {table}")


def legacy_dirac(url: str, clients: int, seconds: int, pilots: Iterable[dict] | str | Path) -> dict:
    """DIRAC's matchAndGetJob SQL on the fairmatch database (see the module docstring).

    `pilots`: resource descriptions, or the JSON-lines file given to run_pilots;
    each transaction takes one at random. `tps` counts every transaction,
    `matches_per_s` only those that claimed a job.
    """
    rows = pilot_rows(_read_pilots(pilots))
    if not rows:
        raise ValueError("no pilot resource descriptions")
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {BENCH_TABLES}")
        _create_value_tables(conn)
        conn.execute(
            "CREATE TABLE bench_pilots (id int PRIMARY KEY, site text NOT NULL,"
            " cpu_time bigint NOT NULL, platforms text[], job_types text[])"
        )
        conn.execute("CREATE UNLOGGED TABLE bench_lost_races (job_id bigint)")
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO bench_pilots VALUES (%s, %s, %s, %s, %s)", rows)
        conn.execute("ANALYZE bench_pilots")
        waiting_before = conn.execute("SELECT count(*) FROM tq_jobs").fetchone()[0]
    try:
        result = pgbench(url, SCRIPTS / "legacy_dirac.sql", clients, seconds, {"n": len(rows)})
        with psycopg.connect(libpq_url(url)) as conn:
            waiting_after = conn.execute("SELECT count(*) FROM tq_jobs").fetchone()[0]
            found_nothing, emptied = conn.execute(
                "SELECT count(*) FILTER (WHERE job_id > 0), count(*) FILTER (WHERE job_id = 0) FROM bench_lost_races"
            ).fetchone()
    finally:
        with psycopg.connect(libpq_url(url), autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {BENCH_TABLES}")
    matched = waiting_before - waiting_after
    return {
        **result,
        "pilots": len(rows),
        "matched": matched,
        "matches_per_s": matched / result["duration_s"],
        "delete_found_nothing": found_nothing,
        "queue_emptied": emptied,
        "no_match": result["transactions"] - matched - found_nothing - emptied,
        "waiting_before": waiting_before,
        "waiting_after": waiting_after,
    }
