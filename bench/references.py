"""The references measured with pgbench on the PostgreSQL that serves fairmatch.

`bare_claim`: the physical limit of a durable queue on this machine, one
autocommitted `DELETE … WHERE id = (SELECT … FOR UPDATE SKIP LOCKED LIMIT 1)`
per transaction on a plain table as long as the queue under test; no HTTP, no
matching, no bookkeeping (references/bare_claim.sql).

`dirac_sql`: DIRAC's TaskQueueDB.matchAndGetJob transcribed onto fairmatch's
tables (task_queues ~ tq_TaskQueues, tq_jobs ~ tq_Jobs) with DIRAC's one table
per multi-valued requirement (tq_TQTo*) built from the queues' value lists
(references/dirac_match.sql): the queue drawn by RAND()/Priority among the
eligible, a job of it drawn at random, the DELETE whose row count says whether
the pilot won it, the job set Matched. Nothing is locked, so two pilots can draw
one job; DIRAC would then retry, here the transaction ends without a match and
is counted (`lost_races`). Owner, group, VO, RAM and tags are not transcribed
(queues with tags are left out), and the SQL alone is measured, as DIRAC's
TaskQueueDB called directly, on PostgreSQL instead of MariaDB.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import psycopg

SCRIPTS = Path(__file__).with_name("references")
VALUE_TABLES = {field: f"bench_tq_{field}" for field in ("sites", "banned_sites", "platforms", "job_types", "tags")}
BENCH_TABLES = ", ".join(("bench_queue", "bench_pilots", "bench_lost_races", *VALUE_TABLES.values()))


def pgbench(url: str, script: str, clients: int, seconds: int, variables: dict | None = None) -> dict:
    """A custom script, prepared statements, no vacuum of pgbench's own tables: tps and latencies."""
    if shutil.which("pgbench") is None:
        raise FileNotFoundError("pgbench is not installed (Debian/Ubuntu: apt-get install postgresql-client)")
    with tempfile.TemporaryDirectory() as logs:
        command = ["pgbench", "-n", "-M", "prepared", "-c", str(clients), "-j", str(min(2, clients)),
                   "-T", str(seconds), "-f", str(SCRIPTS / script), "-l", f"--log-prefix={logs}/tx",
                   *(f"-D{k}={v}" for k, v in (variables or {}).items()), url]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 120, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"pgbench failed (exit {done.returncode}):\n{done.stderr}{done.stdout}")
        tps = re.search(r"^tps = ([\d.]+)", done.stdout, re.MULTILINE)
        latencies = sorted(int(f[2]) / 1000 for log in Path(logs).iterdir()
                           for f in map(str.split, log.read_text().splitlines()) if len(f) > 2 and f[2].isdigit())  # fmt: skip
    if tps is None:
        raise ValueError(f"not a pgbench report:\n{done.stdout}")
    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] if latencies else None
    return {"clients": clients, "tps": float(tps.group(1)), "transactions": len(latencies), "p99_ms": p99}


def bare_claim(url: str, rows: int, clients: int, seconds: int) -> dict:
    """claims/s on a fresh `rows`-row table (dropped after)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_queue")
        conn.execute("CREATE TABLE bench_queue (id bigint, tq_id int, payload text)")
        conn.execute("INSERT INTO bench_queue SELECT g, g %% 500, md5(g::text) FROM generate_series(1, %s) g", [rows])
        conn.execute("ALTER TABLE bench_queue ADD PRIMARY KEY (id)")
        conn.execute("VACUUM ANALYZE bench_queue")
    try:
        result = pgbench(url, "bare_claim.sql", clients, seconds)
        with psycopg.connect(url, autocommit=True) as conn:
            remaining = conn.execute("SELECT count(*) FROM bench_queue").fetchone()[0]
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("DROP TABLE IF EXISTS bench_queue")
    return {**result, "claims_per_s": result["tps"], "ran_dry": remaining == 0}


def _listed(value) -> list[str] | None:
    """A pilot's list field: absent (or `any`) puts no condition on it, as in DIRAC."""
    items = [value] if isinstance(value, str) else list(value or ())
    return None if not items or any(v.lower() == "any" for v in items) else items


def dirac_sql(url: str, clients: int, seconds: int, resources: list[dict]) -> dict:
    """DIRAC's matching SQL on the fairmatch database: each transaction one pilot drawn at
    random; its matches are the waiting jobs it took (they become Matched, as in a fairmatch run)."""
    rows = [(i, r["Site"], int(r["CPUTime"]), _listed(r.get("Platform")), _listed(r.get("JobType")))
            for i, r in enumerate(resources, start=1)]  # fmt: skip
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {BENCH_TABLES}")
        for field, table in VALUE_TABLES.items():  # DIRAC's layout: (tq_id, value), indexed as DIRAC's
            conn.execute(f"CREATE TABLE {table} (tq_id bigint, value text, PRIMARY KEY (tq_id, value))")
            conn.execute(f"INSERT INTO {table} SELECT DISTINCT id, unnest({field}) FROM task_queues")
            conn.execute(f"CREATE INDEX ON {table} (value)")
        conn.execute("CREATE TABLE bench_pilots (id int PRIMARY KEY, site text, cpu_time bigint, platforms text[],"
                     " job_types text[])")  # fmt: skip
        conn.execute("CREATE UNLOGGED TABLE bench_lost_races (job_id bigint)")
        conn.cursor().executemany("INSERT INTO bench_pilots VALUES (%s, %s, %s, %s, %s)", rows)
        conn.execute("ANALYZE")
        before = conn.execute("SELECT count(*) FROM tq_jobs").fetchone()[0]
    try:
        result = pgbench(url, "dirac_match.sql", clients, seconds, {"n": len(rows)})
        with psycopg.connect(url, autocommit=True) as conn:
            after = conn.execute("SELECT count(*) FROM tq_jobs").fetchone()[0]
            lost = conn.execute("SELECT count(*) FROM bench_lost_races").fetchone()[0]
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {BENCH_TABLES}")
    return {**result, "matches_per_s": (before - after) / seconds, "lost_races": lost}
