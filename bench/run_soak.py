"""The soak: jobs live whole lives (submitted, matched, Running, Done) for tens of
minutes under a short retention, and the database must stay the same size.

An empty database and a fairmatch server whose retention keeps a finished job
(its events, request ids and pilots) for `plan.soak_retention` seconds and
purges every `plan.soak_purge_interval` seconds, with autovacuum on as sites
run it (bench/run.py). A waiting pool is submitted through POST /jobs; a submitter keeps it
about constant through POST /jobs while the pilots (bench/lifecycle_pilots.py)
loop match → Running → Done and write every match's time and latency. Every
`plan.soak_sample` seconds the sampler reads the sizes of the database and of
its tables, their live and dead tuples, the jobs per status and the last purge
(GET /status). After the run the purges' windows come from their table, so
that the p99 of /match while a purge ran can be set beside the p99 outside.
"""

from __future__ import annotations

import bisect
import random
import threading
import time
from collections.abc import Sequence
from itertools import pairwise

import httpx
import psycopg

from bench import run_env
from bench.lifecycle_pilots import read_match_times, summary
from bench.run_lifecycle import run_generator
from bench.run_match import describe
from bench.run_plan import Bench
from bench.workload_api import api_top_up
from bench.workloads import lhcb

# the tables that grow with finished jobs, and those matching rewrites
SIZE_TABLES = ("jobs", "job_specs", "job_events", "match_requests", "pilots", "tq_jobs", "task_queues",
               "usage_totals", "usage_charges")  # fmt: skip
PURGE_RUNS = "purge_runs"  # the service's record of each purge
SIZE_TOLERANCE = 0.10  # the last window's mean size within ±10 % of the window before's
P99_LIMIT = 1.5  # p99 of /match during purges at most 1.5× the p99 outside
TOP_UP_EVERY_S = 1.0
DAY_S = 86_400


def retention_settings(retention_s: float, interval_s: float) -> dict[str, str]:
    """FAIRMATCH_RETENTION__* for a retention of `retention_s` seconds on every
    final status (a job's events go with it), request ids and pilots, purged
    every `interval_s`."""
    days = repr(retention_s / DAY_S)
    return {
        "FAIRMATCH_RETENTION__ENABLED": "true",
        **{f"FAIRMATCH_RETENTION__{name}_DAYS": days for name in ("DONE", "FAILED", "KILLED", "PILOTS")},
        "FAIRMATCH_RETENTION__REQUEST_IDS_HOURS": repr(retention_s / 3600),
        "FAIRMATCH_RETENTION__INTERVAL_SECONDS": repr(interval_s),
    }


# --- what is sampled

SIZES = """
SELECT c.relname, pg_total_relation_size(c.oid), s.n_live_tup, s.n_dead_tup, s.autovacuum_count, s.autoanalyze_count
FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE c.relname = ANY(%s)
"""


def sample(url: str, api: str, client: httpx.Client) -> dict:
    """Sizes in bytes (the database, each table with its indexes and TOAST), live and
    dead tuples, autovacuum and autoanalyze runs so far, jobs per status, the last purge."""
    with psycopg.connect(url, autocommit=True) as conn:
        database = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
        tables = {name: {"bytes": size, "live": live, "dead": dead, "autovacuum": av, "autoanalyze": aa}
                  for name, size, live, dead, av, aa in conn.execute(SIZES, (list(SIZE_TABLES),))}  # fmt: skip
        jobs = dict(conn.execute("SELECT status, count(*) FROM jobs GROUP BY status").fetchall())
    try:
        last_purge = client.get(f"{api}/status").json().get("last_purge")
    except (httpx.HTTPError, ValueError) as exc:
        last_purge = {"error": f"{type(exc).__name__}: {exc}"[:200]}
    return {"at": time.time(), "database_bytes": database, "tables": tables, "jobs": jobs, "last_purge": last_purge}


def autovacuum_runs(url: str) -> dict[str, dict[str, int]]:
    """Autovacuum and autoanalyze runs so far, per table of this database."""
    rows = run_env.query(url, "SELECT relname, autovacuum_count, autoanalyze_count FROM pg_stat_user_tables")
    return {name: {"autovacuum": v, "autoanalyze": a} for name, v, a in rows}


def purge_runs(url: str, after: int = 0) -> list[dict] | None:
    """The purges the server recorded after run id `after`, oldest first (each row
    as the service wrote it, its times as Unix seconds); None when the server has
    no such table. The server keeps only its latest runs: a soak reads them as it goes."""
    if run_env.query(url, "SELECT to_regclass(%s)", (PURGE_RUNS,))[0][0] is None:
        return None
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(f"SELECT * FROM {PURGE_RUNS} WHERE id > %s ORDER BY id", (after,))
        names = [c.name for c in cursor.description]
        rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    return [{k: v.timestamp() if hasattr(v, "timestamp") else v for k, v in row.items()} for row in rows]


class PurgeLog:
    """Every purge run read so far, by id."""

    def __init__(self, url: str):
        self.url, self.runs, self.kept = url, {}, True

    def read(self) -> None:
        """The runs recorded since the last read, and again those that were running then."""
        running = [i for i, r in self.runs.items() if r.get("finished_at") is None]
        found = purge_runs(self.url, min(running) - 1 if running else max(self.runs, default=0))
        self.kept = found is not None
        self.runs.update((r["id"], r) for r in found or ())

    def result(self) -> list[dict] | None:
        return [self.runs[i] for i in sorted(self.runs)] if self.kept else None


def rows_purged(runs: Sequence[dict]) -> dict[str, int]:
    """The rows the purges deleted, per kind: jobs (over their statuses), events
    deleted ahead of their jobs, request ids, pilots; and the jobs archived."""
    return {
        "jobs": sum(sum((r.get("jobs") or {}).values()) for r in runs),
        **{kind: sum(r.get(kind) or 0 for r in runs) for kind in ("events", "request_ids", "pilots", "archived")},
    }


def indexes_rebuilt(runs: Sequence[dict]) -> dict[str, int]:
    """How often the purges rebuilt each index (a server that rebuilds none: empty)."""
    counts: dict[str, int] = {}
    for run in runs:
        for entry in run.get("indexes_rebuilt") or ():
            counts[entry["index"]] = counts.get(entry["index"], 0) + 1
    return dict(sorted(counts.items()))


# --- what the run gives


def window_means(samples: Sequence[dict], end: float, window: float, value) -> dict:
    """Mean of `value(sample)` over the last `window` seconds before `end` and over
    the `window` seconds before those, their ratio and whether it is within the tolerance."""
    last = [value(s) for s in samples if end - window < s["t_s"] <= end]
    before = [value(s) for s in samples if end - 2 * window < s["t_s"] <= end - window]
    mean_last = sum(last) / len(last) if last else None
    mean_before = sum(before) / len(before) if before else None
    ratio = mean_last / mean_before if mean_last is not None and mean_before else None
    return {"window_s": window, "mean_before": mean_before, "mean_last": mean_last, "ratio": ratio,
            "holds": ratio is not None and abs(ratio - 1) <= SIZE_TOLERANCE}  # fmt: skip


def during_purges(
    times: Sequence[tuple[float, float, int]], windows: Sequence[tuple[float, float]]
) -> tuple[list[float], list[float]]:
    """The latencies of the matches sent while a purge ran, and of the others. By
    the time sent, not by overlap: a request overlapping a window would count a
    slow request more often than a fast one, and inflate the p99 during purges.
    Purges run one after the other, so only the last window started by then can hold it."""
    windows = sorted(windows)
    starts = [start for start, _ in windows]
    inside, outside = [], []
    for sent, took, _ in times:
        i = bisect.bisect_right(starts, sent) - 1
        (inside if i >= 0 and windows[i][1] >= sent else outside).append(took)
    return inside, outside


def purge_latency(times: Sequence[tuple[float, float, int]], runs: Sequence[dict] | None) -> dict:
    """p50/p99 of /match during purges and outside them, and the ratio of the p99s."""
    windows = [(r["started_at"], r["finished_at"]) for r in runs or () if r.get("finished_at")]
    inside, outside = during_purges(times, windows)
    during, other = summary(inside), summary(outside)
    ratio = during["p99_ms"] / other["p99_ms"] if during["p99_ms"] is not None and other["p99_ms"] else None
    return {"during": during, "outside": other, "p99_ratio": ratio,
            "holds": None if ratio is None else ratio <= P99_LIMIT}  # fmt: skip


def per_sample_rates(samples: list[dict], times: Sequence[tuple[float, float, int]]) -> None:
    """Add to each sample the matches/s (answers 200) and /match p99 since the one before."""
    answered = sorted((sent + took, took, status) for sent, took, status in times)
    ends = [a for a, _, _ in answered]
    for before, s in pairwise(samples):
        part = answered[bisect.bisect_right(ends, before["at"]) : bisect.bisect_right(ends, s["at"])]
        seconds = s["at"] - before["at"]
        s["matches_per_s"] = sum(1 for _, _, status in part if status == 200) / seconds if seconds else None
        s["match_p99_ms"] = summary([took for _, took, _ in part])["p99_ms"]


# --- the section


class Submitter(threading.Thread):
    """Keeps the waiting pool at `target` through POST /jobs until stopped."""

    def __init__(self, api: str, url: str, workload, target: int, batch: int, rng: random.Random):
        super().__init__(daemon=True)
        self.args = (api, url, workload, target, batch, rng)
        self.jobs, self.seconds, self.retried_503, self.error = 0, 0.0, 0, None
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(TOP_UP_EVERY_S):
            try:
                done = api_top_up(*self.args)
            except Exception as exc:  # reported with the results; the soak goes on without new jobs
                self.error = f"{type(exc).__name__}: {exc}"[:500]
                return
            self.jobs += done["jobs"]
            self.seconds += done["seconds"]
            self.retried_503 += done["retried_503"]


def soak_section(b: Bench) -> dict:
    """Whole lives under a short retention for plan.soak_seconds: the sizes, the
    purges, and /match's latency during purges and outside them."""
    plan = b.plan
    workload = lhcb(plan.lhcb_scale, plan.seed)
    resources = b.pilots_file(workload)
    b.fresh_database()
    rng = random.Random(f"soak:{plan.seed}")
    window = min(plan.soak_window, plan.soak_seconds // 2)
    settings = retention_settings(plan.soak_retention, plan.soak_purge_interval)
    times_file = b.out_dir / "soak_match_times.txt"  # kept: the purges can be set against it again
    out: dict = {"workload": describe(workload, scale=plan.lhcb_scale), "workers": plan.workers,
                 "pilots": plan.soak_pilots, "waiting_jobs": plan.soak_waiting, "seconds": plan.soak_seconds,
                 "sample_s": plan.soak_sample, "retention_s": plan.soak_retention,
                 "purge_interval_s": plan.soak_purge_interval, "server_settings": settings}  # fmt: skip
    out["autovacuum_before"] = b.autovacuum.get("before")
    server = b.start_server(settings)
    top_up = api_top_up(server.api, b.url, workload, plan.soak_waiting, plan.site_batch, rng, b.log)
    b.log(f"soak: {top_up['jobs']:,} jobs submitted through POST /jobs in {top_up['seconds']:.1f} s")
    run_env.analyze(b.url)
    server.recompute()
    submitter = Submitter(server.api, b.url, workload, plan.soak_waiting, plan.site_batch, rng)
    started, result, failure = threading.Event(), {}, []

    def generate() -> None:
        try:
            result.update(run_generator(server.root, resources, plan.soak_pilots, plan.soak_seconds,
                                        started.set, plan.pilot_life, times_file))  # fmt: skip
        except Exception as exc:  # raised again below, in the section's thread
            failure.append(exc)
            started.set()

    generator = threading.Thread(target=generate, daemon=True)
    autovacuum_at_start = autovacuum_runs(b.url)
    samples: list[dict] = []
    purges = PurgeLog(b.url)
    with httpx.Client(timeout=30) as client:
        generator.start()
        started.wait()
        submitter.start()
        t0 = time.time()
        while generator.is_alive() and not failure:
            s = sample(b.url, server.api, client)
            s["t_s"] = round(s["at"] - t0, 1)
            samples.append(s)
            purges.read()
            size = ", ".join(f"{t} {s['tables'].get(t, {}).get('bytes', 0) / 2**20:.1f}"
                             for t in ("jobs", "job_specs", "job_events"))  # fmt: skip
            b.log(f"soak {s['t_s']:6.0f} s: database {s['database_bytes'] / 2**20:.1f} MiB ({size} MiB);"
                  f" jobs {s['jobs']}")  # fmt: skip
            generator.join(max(0.0, plan.soak_sample - (time.time() - s["at"])))
        submitter.stop.set()
        submitter.join()
        if failure:
            raise failure[0]
        samples.append({**sample(b.url, server.api, client), "t_s": round(time.time() - t0, 1)})
    purges.read()
    runs = purges.result()
    autovacuum_at_end = autovacuum_runs(b.url)
    b.stop_server()
    times = read_match_times(times_file)
    per_sample_rates(samples, times)
    for r in runs or ():
        r["t_s"] = round(r["started_at"] - t0, 1)
    end = samples[-1]["t_s"]
    during = [r for r in runs or () if r["t_s"] >= 0]
    out.update({
        "matches_per_s": result["matches_per_s"], "jobs_per_s": result["jobs_per_s"],
        "no_match_per_s": result["no_match_per_s"], "requests": result["requests"], "errors": result["errors"],
        "error_count": result["error_count"], "generator_cpu_s": result["cpu_s"],
        "submitted": {"jobs": submitter.jobs + top_up["jobs"], "jobs_per_s": submitter.jobs / end if end else None,
                      "seconds_posting": round(submitter.seconds, 1), "retried_503": submitter.retried_503,
                      "error": submitter.error},
        "samples": samples,
        "size": window_means(samples, end, window, lambda s: s["database_bytes"]),
        "table_sizes": {t: window_means(samples, end, window, lambda s, t=t: s["tables"].get(t, {}).get("bytes", 0))
                        for t in SIZE_TABLES},
        "purges": runs,
        # counted from the pilots' start; those of the set-up are drawn, and found nothing to delete
        "purge_count": None if runs is None else len(during),
        "rows_purged": None if runs is None else rows_purged(during),
        "indexes_rebuilt": None if runs is None else indexes_rebuilt(during),
        "purge_errors": None if runs is None else [r["error"] for r in runs if r.get("error")],
        "purge_latency": purge_latency(times, runs),
        "autovacuum_runs": {t: {k: n - autovacuum_at_start.get(t, {}).get(k, 0) for k, n in counts.items()}
                            for t, counts in autovacuum_at_end.items()
                            if counts != autovacuum_at_start.get(t)},
    })  # fmt: skip
    try:
        from bench.plot import soak_sizes

        out["figure"] = str(soak_sizes(out, b.out_dir / "soak_sizes.png"))
    except Exception as exc:  # the figure is a view of the results, which stand without it
        out["figure_error"] = f"{type(exc).__name__}: {exc}"
    b.log(f"soak: {soak_summary(out)}")
    return out


def soak_summary(out: dict) -> str:
    size, lat = out["size"], out["purge_latency"]
    ratio = "—" if size["ratio"] is None else f"{size['ratio']:.3f}"
    p99 = "—" if lat["p99_ratio"] is None else f"{lat['p99_ratio']:.2f}"
    return (f"{out['matches_per_s']:,.0f} matches/s, {out['jobs_per_s']:,.0f} jobs/s; database size, last window"
            f" ÷ the one before: {ratio}; /match p99 during ÷ outside purges: {p99}; purges {out['purge_count']},"
            f" deleted {out['rows_purged']}; errors {out['error_count']}")  # fmt: skip
