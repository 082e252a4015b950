"""A job's whole life under load: submitted through POST /jobs, matched, reported
Running, then Done with its CPU (which logs a charge), by P concurrent pilots
(bench/lifecycle_pilots.py), with autovacuum on as sites run it (bench/run.py).

Beside the throughput and latencies per request kind, each run records the
CPU the service, PostgreSQL and the load generator spent per finished job
(from /proc), what PostgreSQL's busy backends waited on once a second
(pg_stat_activity and pg_locks: lock waits on the accounting tables are
counted apart), and the owner groups of the jobs matched against those of the
waiting jobs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from bench import run_env
from bench.pilots import PILOT_LIFE
from bench.run_cpu import CpuMeter, parent_of, per_unit_ms
from bench.run_match import describe
from bench.run_metrics import claim_batches, read_claim_batches
from bench.run_plan import Bench
from bench.workloads import lhcb

ACCOUNTING_TABLES = ("usage_totals", "usage_charges", "associations")

# --- what PostgreSQL's backends wait on

# the busy backends of this database but the sampler's; for a lock wait the
# relation of the lock not granted, else (a row lock: transactionid) that of the
# tuple lock the waiter holds, which names the row's table
ACTIVITY = """
SELECT a.backend_type, a.state, a.wait_event_type, a.wait_event, w.locktype, w.relation::regclass::text, w.objid,
       (SELECT t.relation::regclass::text FROM pg_locks t
        WHERE t.pid = a.pid AND t.locktype = 'tuple' AND t.granted LIMIT 1)
FROM pg_stat_activity a
LEFT JOIN LATERAL (SELECT locktype, relation, objid FROM pg_locks l WHERE l.pid = a.pid AND NOT l.granted LIMIT 1) w
  ON true
WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() AND COALESCE(a.state, '') <> 'idle'
"""


def wait_of(row: Sequence) -> tuple[str, str]:
    """(wait event, relation) of one sampled backend: `CPU` when it waits on
    nothing, `idle in transaction` for a session between two statements of a
    transaction; the relation only for lock waits."""
    backend_type, state, wait_type, wait_event, locktype, relation, objid, tuple_relation = row
    state = state or ""
    event = state if state.startswith("idle in transaction") else f"{wait_type}:{wait_event}" if wait_type else "CPU"
    if backend_type != "client backend":
        event = f"{backend_type} {event}"
    target = ""
    if wait_type == "Lock" and not state.startswith("idle"):
        target = relation or tuple_relation or (f"advisory {objid}" if locktype == "advisory" else locktype or "?")
    return event, target


def accounting_relation(relation: str) -> bool:
    """An accounting table, or one of its indexes."""
    name = relation.rsplit(".", 1)[-1]
    return any(name == t or name.startswith(f"{t}_") for t in ACCOUNTING_TABLES)


class Activity:
    """pg_stat_activity sampled once a second in a thread, on a connection of its own."""

    def __init__(self, url: str, every: float = 1.0):
        self.conn = psycopg.connect(url, autocommit=True)
        self.pid = self.conn.info.backend_pid
        self.autovacuum = self.conn.execute("SHOW autovacuum").fetchone()[0]
        self.every, self.samples, self.waits = every, 0, Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            rows = self.conn.execute(ACTIVITY).fetchall()
            self.samples += 1
            self.waits.update(wait_of(r) for r in rows)
            self._stop.wait(self.every)

    def __enter__(self) -> Activity:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.conn.close()

    def result(self) -> dict:
        return {**wait_summary(self.waits, self.samples), "autovacuum": self.autovacuum}


def wait_summary(waits: Counter, samples: int) -> dict:
    """Backends seen per (wait event, relation), most seen first, and the lock
    waits among them: in all, and on the accounting tables."""
    locks = {key: n for key, n in waits.items() if key[0].startswith("Lock:")}
    return {
        "samples": samples,
        "backends_sampled": sum(waits.values()),
        "lock_waits": sum(locks.values()),
        "accounting_lock_waits": sum(n for (_, rel), n in locks.items() if accounting_relation(rel)),
        "by_wait": [[event, rel, n] for (event, rel), n in waits.most_common()],
    }


# --- one run


def run_generator(
    root: str, resources: Path, pilots: int, seconds: float, on_start: Callable[[], None], pilot_life: int = PILOT_LIFE,
    match_times: Path | None = None,
) -> dict:  # fmt: skip
    """bench/lifecycle_pilots.py in a subprocess; `on_start` runs once its
    pilots are connected, just before they start. With `match_times`, the
    generator writes every match's time, latency and status there."""
    command = [sys.executable, "-m", "bench.lifecycle_pilots", root, str(resources), "--pilots", str(pilots),
               "--seconds", str(seconds), "--pilot-life", str(pilot_life)]  # fmt: skip
    if match_times is not None:
        command += ["--match-times", str(match_times)]
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=run_env.REPO)
    try:
        ready = process.stdout.readline()
        if not ready.startswith('{"ready"'):
            raise RuntimeError(f"the load generator did not start: {ready!r}")
        on_start()
        process.stdin.write("go\n")
        process.stdin.flush()
        out, _ = process.communicate(timeout=seconds + 120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    if process.returncode != 0:
        raise RuntimeError(f"the load generator failed (exit {process.returncode}): {out[-2000:]}")
    return json.loads(out.strip().splitlines()[-1])


def target_shares(recompute: Mapping) -> dict[str, float]:
    """Each group's share of the slots as the priority run decided it (the dirac
    policy's normalised shares, summed over the group's entities); {} under
    the other policies, which report no shares."""
    shares: Counter = Counter()
    for entity in recompute.get("entities", []):
        shares[entity["group"]] += entity["normalised_share"]
    return dict(shares)


def owner_groups(
    url: str, since: datetime, until: datetime, waiting: Mapping[str, int], targets: Mapping[str, float]
) -> dict[str, dict]:
    """Per owner group: jobs waiting at the start and jobs matched during the run, with their
    shares, beside the share the priority run gave the group (every pilot can take every
    group's jobs only in a uniform workload: a group few pilots can run gets less)."""
    matched = dict(run_env.query(
        url,
        "SELECT j.owner_group, count(*) FROM job_events e JOIN jobs j ON j.id = e.job_id"
        " WHERE e.status = 'Matched' AND e.at >= %s AND e.at <= %s GROUP BY j.owner_group",
        (since, until),
    ))  # fmt: skip
    total_waiting, total_matched = sum(waiting.values()) or 1, sum(matched.values()) or 1
    return {g: {"waiting": waiting.get(g, 0), "waiting_share": waiting.get(g, 0) / total_waiting,
                "matched": matched.get(g, 0), "matched_share": matched.get(g, 0) / total_matched,
                "target_share": targets.get(g)}
            for g in sorted({*waiting, *matched})}  # fmt: skip


def lifecycle_run(
    b: Bench, server: run_env.Service, resources: Path, pilots: int, targets: Mapping[str, float],
    profile_as: str | None = None,
) -> dict:  # fmt: skip
    """One measured run of b.plan.seconds: the load generator with the CPU of every
    side (bench/run_cpu.py), the claim batches of a fairmatch server and the
    backends' waits around it; with --profile and `profile_as` at the profiled
    load, a flame graph `<profile_as>-<pilots>.svg`."""
    url = b.url
    waiting = dict(run_env.query(url, "SELECT q.owner_group, count(*) FROM tq_jobs t"
                                      " JOIN task_queues q ON q.id = t.tq_id GROUP BY q.owner_group"))  # fmt: skip
    batches_before = read_claim_batches(server.root) if server.exposes_metrics else None
    profile = None
    with run_env.watched_tables(url, (*run_env.HOT_TABLES, *ACCOUNTING_TABLES)) as vacuum, Activity(url) as activity:
        # the sampler's own session is PostgreSQL work of the benchmark, not of the service
        meter = CpuMeter(server.process.pid, parent_of(activity.pid), url, exclude=[activity.pid])
        since: list[datetime] = []

        def start() -> None:
            nonlocal profile
            profile = b.start_profile(profile_as, server, pilots) if profile_as else None
            meter.start()
            since.append(datetime.now(UTC))

        run = run_generator(server.root, resources, pilots, b.plan.seconds, start, b.plan.pilot_life)
        used, until = meter.stop(), datetime.now(UTC)
    batches_after = read_claim_batches(server.root) if server.exposes_metrics else None
    used.pop("children")  # the generator, waited for inside the run, reports its own CPU
    used["load_generator"] = run["cpu_s"]
    return {
        **run,
        "cpu_s": used,
        "cpu_ms_per_job": per_unit_ms(used, run["jobs"]),
        "cpu_ms_per_request": per_unit_ms(used, sum(r["count"] for r in run["requests"].values())),
        "claim_batches": claim_batches(batches_before, batches_after),
        "profile": b.finish_profile(profile, f"{profile_as}, {pilots} pilots"),
        "activity": activity.result(),
        "vacuum": vacuum,
        "owner_groups": owner_groups(url, since[0], until, waiting, targets),
    }  # fmt: skip


def _summary(run: dict) -> str:
    req, act = run["requests"], run["activity"]
    return (f"{run['jobs_per_s']:,.0f} jobs/s, {run['matches_per_s']:,.0f} matches/s, {run['no_match_per_s']:,.0f}"
            f" 204/s; p99 match {req['match']['p99_ms']} ms, running {req['running']['p99_ms']} ms, done"
            f" {req['done']['p99_ms']} ms; CPU ms/job service {_ms(run, 'service')}, PostgreSQL"
            f" {_ms(run, 'postgres')}, generator {_ms(run, 'load_generator')}; lock waits {act['lock_waits']}"
            f" ({act['accounting_lock_waits']} on accounting tables) in {act['samples']} samples;"
            f"{_claims(run)} errors {run['error_count']}")  # fmt: skip


def _claims(run: dict) -> str:
    batches = run.get("claim_batches")
    return "" if not batches or batches["mean"] is None else f" claims per statement {batches['mean']:.2f};"


def _ms(run: dict, side: str) -> str:
    v = run["cpu_ms_per_job"].get(side)
    return "—" if v is None else f"{v:.2f}"


def lifecycle_section(b: Bench) -> dict:
    """An empty database, the jobs submitted through the API by the server under
    test; before each run topped up (through the API) to the same backlog and
    priorities recomputed; then the pilots for plan.seconds. Autovacuum runs
    as the whole benchmark runs it (bench/run.py)."""
    plan = b.plan
    workload = lhcb(plan.lhcb_scale, plan.seed)
    resources = b.pilots_file(workload)  # the lhcb section's pilots
    b.fresh_database()
    out: dict = {"workload": describe(workload, scale=plan.lhcb_scale), "workers": plan.workers,
                 "waiting_jobs": plan.lifecycle_jobs, "seconds": plan.seconds, "runs": {},
                 "autovacuum_before": b.autovacuum.get("before")}  # fmt: skip
    server = b.start_server()
    out["load"] = b.submit(workload, plan.lifecycle_jobs)
    run_env.analyze(b.url)
    for pilots in plan.lifecycle_pilots:
        top_up = b.submit(workload, plan.lifecycle_jobs)
        _, decided = server.recompute()
        waiting = run_env.waiting_jobs(b.url)
        run = lifecycle_run(b, server, resources, pilots, target_shares(decided), "lifecycle")
        out["runs"][str(pilots)] = {**run, "waiting_at_start": waiting, "top_up": top_up}
        b.log(f"lifecycle, {pilots} pilots, {waiting:,} waiting: {_summary(run)}")
    # the reference of the same run: the lean claim service's whole lives (its match, and a
    # status report of one statement), same pilots and generator, on the backlog topped up
    b.submit(workload, plan.lifecycle_jobs)
    lean = b.start_lean()
    out["lean"] = {}
    for pilots in plan.lifecycle_pilots:
        run = lifecycle_run(b, lean, resources, pilots, {})
        out["lean"][str(pilots)] = {**run, "waiting_at_start": run_env.waiting_jobs(b.url)}
        b.log(f"lean service, {pilots} pilots: {_summary(run)}")
    b.stop_server()
    out["autovacuum"] = sorted({r["activity"]["autovacuum"] for r in out["runs"].values()})
    out["ratio_to_lean"] = {
        p: run["jobs_per_s"] / out["lean"][p]["jobs_per_s"] if out["lean"].get(p, {}).get("jobs_per_s") else None
        for p, run in out["runs"].items()
    }
    return out
