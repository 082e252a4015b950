"""What the benchmark measures, one section each, every figure beside a reference
measured in the same run on the same database:

- lhcb: matching on LHCb's queues, fairmatch against the leanest Python claim
  service, the bare PostgreSQL claim and DIRAC's matching SQL;
- diracx: matching at DiracX's shape (10,000 queues, a long tail), against the lean service;
- lifecycle: a job's whole life (match, Running, Done through the API), against the
  lean service's whole lives;
- soak: whole lives under a short retention, the waiting pool kept full, so that
  jobs finish as fast as they are matched: the database's size must level off and
  the purges must not slow matching;
- ledger (only when named in --only: it needs py-spy and the right to trace the services):
  where fairmatch's CPU goes in a match and in a whole life, part by part, beside the
  lean service's.

Each section starts from an empty database; jobs enter it through POST /jobs.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg

from bench import env, ledger
from bench.pilot_load import percentiles
from bench.references import bare_claim, dirac_sql
from bench.workloads import Workload, diracx, lhcb, pilots, submit

LHCB_JOBS = 871_925  # the waiting jobs of the snapshot's queues
HOT_TABLES = ("tq_jobs", "jobs", "job_events", "task_queues", "pilots", "match_requests", "usage_charges")
SIZE_TOLERANCE = 0.10  # the soak's last window's mean database size within ±10 % of the window before's
P99_LIMIT = 1.5  # p99 of /match while a purge runs at most 1.5 times the p99 outside


@dataclass(frozen=True)
class Plan:
    quick: bool
    seconds: int  # each measured run
    workers: int
    lhcb_jobs: int
    diracx_jobs: tuple[int, ...]
    lifecycle_jobs: int
    soak_jobs: int
    soak_seconds: int
    pilots: tuple[int, ...] = (8, 64)  # concurrent pilots of the matching runs
    lifecycle_pilots: tuple[int, ...] = (8, 32, 64)
    soak_pilots: int = 32
    ledger_pilots: int = 32
    sql_clients: tuple[int, ...] = (8, 64)  # pgbench clients of the bare claim and DIRAC's SQL
    descriptions: int = 10_000  # pilot resource descriptions drawn per workload

    @classmethod
    def build(
        cls,
        quick: bool,
        seconds: int | None,
        workers: int,
        max_jobs: int,
        soak_seconds: int | None,
        max_pilots: int | None = None,
    ) -> Plan:
        def capped(counts: tuple[int, ...]) -> tuple[int, ...]:
            return counts if max_pilots is None else tuple(sorted({min(n, max_pilots) for n in counts}))

        return cls(
            quick=quick, seconds=seconds or (3 if quick else 20), workers=workers,
            lhcb_jobs=min(max_jobs, 43_600 if quick else LHCB_JOBS),
            diracx_jobs=tuple(sorted({min(max_jobs, n) for n in ((50_000,) if quick else (1_000_000,))})),
            lifecycle_jobs=min(max_jobs, 20_000 if quick else 200_000),
            soak_jobs=min(max_jobs, 20_000 if quick else 100_000),
            soak_seconds=soak_seconds or (120 if quick else 1200),
            pilots=capped(cls.pilots), lifecycle_pilots=capped(cls.lifecycle_pilots),
            soak_pilots=capped((cls.soak_pilots,))[0], ledger_pilots=capped((cls.ledger_pilots,))[0],
            sql_clients=capped(cls.sql_clients),
        )  # fmt: skip


class Bench:
    """The database of one section and at most one service at a time."""

    def __init__(self, plan: Plan, admin_url: str, database: str, out_dir: Path):
        self.plan, self.admin_url, self.database, self.out_dir = plan, admin_url, database, out_dir
        self.url = ""
        self.service: env.Service | None = None
        self.started = time.monotonic()
        self.rng = random.Random("submit")

    def log(self, line: str) -> None:
        print(f"[{time.monotonic() - self.started:7.1f}s] {line}", file=sys.stderr, flush=True)

    def fresh(self) -> None:
        self.stop()
        self.url = env.fresh_database(self.admin_url, self.database)

    def stop(self) -> None:
        if self.service is not None:
            self.service.stop()
            self.service = None

    def fairmatch(self, settings: dict[str, str] | None = None) -> env.Service:
        """The fairmatch server running, or a new one (the lean service stopped), priorities computed."""
        if self.service is None or self.service.name != "fairmatch":
            self.stop()
            self.service = env.fairmatch_server(self.url, self.plan.workers, self.out_dir, settings or {})
            env.recompute(self.service)
        return self.service

    def lean(self) -> env.Service:
        self.stop()
        self.service = env.lean_server(self.url, self.plan.workers, self.out_dir)
        return self.service

    def lean_runs(self, workload: Workload, target: int, resources: Path, counts: tuple[int, ...] = (),
                  lives: bool = False) -> dict[int, dict]:  # fmt: skip
        """The lean service at each pilot count, the queue filled to `target` before each run as
        for fairmatch's (a fast run may take most of a small queue)."""
        runs = {}
        for count in counts or self.plan.pilots:
            self.fill(workload, target)
            runs[count] = self.pilots(self.lean(), resources, count, self.plan.seconds, lives)
        return runs

    def fill(self, workload: Workload, target: int) -> dict:
        """`target` jobs waiting, submitted through fairmatch's POST /jobs, then analysed (as autoanalyze
        would within a minute of such a load) and the priorities computed again."""
        service = self.fairmatch()
        done = submit(service.api, self.url, workload, target, self.rng, self.log)
        if done["jobs"]:
            self.log(f"submitted {done['jobs']:,} jobs in {done['seconds']} s ({done['jobs_per_s']:,} jobs/s)")
            env.query(self.url, "ANALYZE")
            env.recompute(service)
        return done

    def resources(self, workload: Workload) -> Path:
        path = self.out_dir / f"pilots-{workload.name}.jsonl"
        path.write_bytes(b"\n".join(pilots(workload, self.plan.descriptions)) + b"\n")
        return path

    def pilots(self, service: env.Service, resources: Path, count: int, seconds: float, lives: bool = False,
               match_times: Path | None = None, started: threading.Event | None = None) -> dict:  # fmt: skip
        """One measured run of the load generator: its figures, and the CPU each side spent per match."""
        command = [sys.executable, "-m", "bench.pilot_load", service.root, str(resources), "--pilots", str(count),
                   "--seconds", str(seconds)] + (["--lives"] if lives else [])  # fmt: skip
        command += ["--match-times", str(match_times)] if match_times else []
        waiting = env.waiting_jobs(self.url)
        meter = env.CpuMeter(service.process.pid, self.url)
        process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=env.REPO)
        try:
            assert process.stdin and process.stdout
            if not process.stdout.readline().startswith('{"ready"'):
                raise RuntimeError("the load generator did not start")
            meter.start()
            if started:
                started.set()
            process.stdin.write("go\n")
            process.stdin.flush()
            out, _ = process.communicate(timeout=seconds + 120)
        finally:
            if process.poll() is None:
                process.kill()
        if process.returncode:
            raise RuntimeError(f"the load generator failed (exit {process.returncode})")
        run = json.loads(out.strip().splitlines()[-1])
        cpu = {**meter.stop(), "generator": run.pop("generator_cpu_s")}
        unit = run["jobs"] if lives else run["matches"]
        run["cpu_ms_per_" + ("job" if lives else "match")] = {
            k: v * 1000 / unit if unit else None for k, v in cpu.items()
        }
        run["waiting_at_start"] = waiting
        side = f"{run['jobs_per_s']:,.0f} jobs/s" if lives else f"{run['matches_per_s']:,.0f} matches/s"
        self.log(f"{service.name}, {count} pilots: {side}, p99 match {run['requests']['match']['p99_ms']} ms,"
                 f" errors {run['error_count']}")  # fmt: skip
        return run


def vacuum_activity(url: str) -> dict[str, dict[str, int]]:
    """Autovacuum and autoanalyze runs so far and dead tuples, per hot table."""
    rows = env.query(url, "SELECT relname, autovacuum_count, autoanalyze_count, n_dead_tup FROM pg_stat_user_tables"
                          " WHERE relname = ANY(%s)", (list(HOT_TABLES),))  # fmt: skip
    return {name: {"autovacuum": v, "autoanalyze": a, "dead": d} for name, v, a, d in rows}


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def lhcb_section(b: Bench) -> dict:
    plan = b.plan
    workload = lhcb(plan.lhcb_jobs / LHCB_JOBS)
    b.fresh()
    out: dict = {"workload": workload.describe(), "load": b.fill(workload, workload.total_jobs),
                 "fairmatch": {}, "lean": {}, "bare_claim": {}, "dirac_sql": {}}  # fmt: skip
    resources = b.resources(workload)
    for count in plan.pilots:
        b.fill(workload, workload.total_jobs)
        out["fairmatch"][count] = b.pilots(b.fairmatch(), resources, count, plan.seconds)
    out["lean"] = b.lean_runs(workload, workload.total_jobs, resources)
    descriptions = [json.loads(line) for line in resources.read_text().splitlines()]
    b.fill(workload, workload.total_jobs)
    b.stop()
    for clients in plan.sql_clients:
        out["bare_claim"][clients] = bare_claim(b.url, workload.total_jobs, clients, plan.seconds)
        out["dirac_sql"][clients] = dirac_sql(b.url, clients, plan.seconds, descriptions)
        b.log(f"{clients} clients: bare claim {out['bare_claim'][clients]['claims_per_s']:,.0f}/s,"
              f" DIRAC's SQL {out['dirac_sql'][clients]['matches_per_s']:,.0f} matches/s")  # fmt: skip
    return out


def diracx_section(b: Bench) -> dict:
    plan = b.plan
    out: dict = {"sizes": {}}
    for size in plan.diracx_jobs:
        workload = diracx(size)
        b.fresh()
        run: dict = {"workload": workload.describe(), "load": b.fill(workload, size), "fairmatch": {}, "lean": {}}
        started = time.perf_counter()
        env.recompute(b.fairmatch())  # the priorities of 10,000 queues, as the periodic run computes them
        run["recompute_s"] = round(time.perf_counter() - started, 2)
        resources = b.resources(workload)
        for count in plan.pilots:
            b.fill(workload, size)
            run["fairmatch"][count] = b.pilots(b.fairmatch(), resources, count, plan.seconds)
        run["lean"] = b.lean_runs(workload, size, resources)
        out["sizes"][size] = run
    return out


def lifecycle_section(b: Bench) -> dict:
    plan = b.plan
    workload = lhcb(plan.lifecycle_jobs / LHCB_JOBS)
    b.fresh()
    out: dict = {"workload": workload.describe(), "load": b.fill(workload, plan.lifecycle_jobs),
                 "fairmatch": {}, "lean": {}}  # fmt: skip
    resources = b.resources(workload)
    for count in plan.lifecycle_pilots:
        b.fill(workload, plan.lifecycle_jobs)
        out["fairmatch"][count] = b.pilots(b.fairmatch(), resources, count, plan.seconds, lives=True)
    out["lean"] = b.lean_runs(workload, plan.lifecycle_jobs, resources, plan.lifecycle_pilots, lives=True)
    return out


def retention_settings(seconds: float, interval: float) -> dict[str, str]:
    """Every final job, its events, request ids and pilots kept `seconds`; purges every `interval`."""
    days = repr(seconds / 86_400)
    return {"FAIRMATCH_RETENTION__ENABLED": "true",
            **{f"FAIRMATCH_RETENTION__{kind}_DAYS": days for kind in ("DONE", "FAILED", "KILLED", "PILOTS")},
            "FAIRMATCH_RETENTION__REQUEST_IDS_HOURS": repr(seconds / 3600),
            "FAIRMATCH_RETENTION__INTERVAL_SECONDS": repr(interval)}  # fmt: skip


def soak_section(b: Bench) -> dict:
    """Whole lives for plan.soak_seconds, a submitter keeping the waiting pool full, finished jobs
    kept 2 minutes (30 s quick) and purged every 25 s (10 s quick); the database's size sampled."""
    plan = b.plan
    retention, interval = (30, 10) if plan.quick else (120, 25)
    workload = lhcb(plan.soak_jobs / LHCB_JOBS)
    b.fresh()
    server = b.fairmatch(retention_settings(retention, interval))
    b.fill(workload, plan.soak_jobs)
    resources, times_file = b.resources(workload), b.out_dir / "soak-match-times.txt"
    started, stop = threading.Event(), threading.Event()
    samples: list[tuple[float, int]] = []
    purges: dict[int, tuple[float, float | None, str | None]] = {}
    submitted, failure = [0], []

    def keep_full() -> None:
        started.wait()
        rng = random.Random("soak")
        while not stop.wait(1.0):
            try:
                submitted[0] += submit(server.api, b.url, workload, plan.soak_jobs, rng)["jobs"]
                with psycopg.connect(b.url, autocommit=True) as conn:
                    size = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
                    samples.append((time.time(), size))
                    for pid, begun, ended, error in conn.execute(
                            "SELECT id, started_at, finished_at, error FROM purge_runs"):  # fmt: skip
                        purges[pid] = (begun.timestamp(), ended and ended.timestamp(), error)
            except Exception as exc:  # reported with the results; the soak goes on
                failure.append(f"{type(exc).__name__}: {exc}"[:300])

    keeper = threading.Thread(target=keep_full, daemon=True)
    keeper.start()
    before = vacuum_activity(b.url)
    run = b.pilots(server, resources, plan.soak_pilots, plan.soak_seconds, lives=True, match_times=times_file,
                   started=started)  # fmt: skip
    stop.set()
    keeper.join()
    after = vacuum_activity(b.url)
    b.stop()
    windows = sorted((s, e) for s, e, _ in purges.values() if e)
    inside, outside = [], []
    for line in times_file.read_text().splitlines():
        sent, took, _ = line.split()
        (inside if any(s <= float(sent) <= e for s, e in windows) else outside).append(float(took))
    end, window = time.time(), plan.soak_seconds / 4
    last = [size for at, size in samples if at > end - window]
    earlier = [size for at, size in samples if end - 2 * window < at <= end - window]
    growth = ratio(sum(last) / len(last), sum(earlier) / len(earlier)) if last and earlier else None
    during, outside_p = percentiles(inside), percentiles(outside)
    p99 = ratio(during["p99_ms"], outside_p["p99_ms"])
    return {
        "workload": workload.describe(), "pilots": plan.soak_pilots, "seconds": plan.soak_seconds,
        "retention_s": retention, "purge_interval_s": interval, "run": run, "submitted": submitted[0],
        "database_mb": {"first": samples[0][1] / 2**20 if samples else None,
                        "last": samples[-1][1] / 2**20 if samples else None},
        "size_ratio": growth, "size_holds": growth is not None and abs(growth - 1) <= SIZE_TOLERANCE,
        "purges": len(windows), "purge_errors": [e for _, _, e in purges.values() if e],
        "match_during_purges": during, "match_outside_purges": outside_p, "p99_ratio": p99,
        "p99_holds": None if p99 is None else p99 <= P99_LIMIT, "failures": failure[:5],
        "autovacuum_runs": {t: a["autovacuum"] - before.get(t, {}).get("autovacuum", 0) for t, a in after.items()},
    }  # fmt: skip


def ledger_section(b: Bench) -> dict:
    return ledger.section(b, lhcb(b.plan.lhcb_jobs / LHCB_JOBS))


SECTIONS = {"lhcb": lhcb_section, "diracx": diracx_section, "lifecycle": lifecycle_section, "soak": soak_section,
            "ledger": ledger_section}  # fmt: skip
ASKED_FOR = {"ledger"}  # run only when named in --only
