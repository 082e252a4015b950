"""The matching sections: LHCb 1:1 against the references (the bare claim and
DIRAC's SQL with pgbench, the lean claim service with wrk), throughput against
queue size (LHCb scaled, and the DiracX target at 1M and 10M)."""

from __future__ import annotations

from pathlib import Path

from bench import run_env
from bench.pilots import run_pilots
from bench.references import bare_claim, legacy_dirac
from bench.run_cpu import CpuMeter, per_unit_ms
from bench.run_metrics import claim_batches, read_claim_batches
from bench.run_plan import Bench
from bench.run_selection import selection_timing
from bench.selection_sql import sql_selection_timing
from bench.workloads import Workload, diracx, lhcb

LHCB_JOBS = 871_973  # the snapshot's published total, for scaling to a wanted size


def describe(workload: Workload, **extra) -> dict:
    return {"name": workload.name, "seed": workload.seed, "task_queues": len(workload.specs),
            "jobs": workload.total_jobs, "user_priorities": [list(m) for m in workload.user_priorities],
            **extra}  # fmt: skip


def errors(run: dict) -> int:
    """Socket errors and timeouts, plus answers other than 200 and 204."""
    socket = sum(n for kind, n in run["errors"].items() if kind != "status")
    return socket + run["status"]["other"]


def _summary(run: dict) -> str:
    lat = run["latency_ms"]
    return (f"{run['matches_per_s']:,.0f} matches/s, {run['rps']:,.0f} req/s, p50 {lat['p50']:.1f} ms,"
            f" p99 {lat['p99']:.1f} ms, 204: {run['status']['204']:,}, errors: {errors(run)}")  # fmt: skip


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def measured_run(
    b: Bench, service: run_env.Service, resources: Path, connections: int, profile_as: str | None = None
) -> dict:
    """One closed-loop wrk run with what it cost around it: the CPU of the service,
    of PostgreSQL and of wrk (in all, per match and per request), the claim
    batches of a fairmatch server (None for a server without the histogram),
    what autovacuum did on the hot tables meanwhile (run_env.watched_tables),
    and with --profile and `profile_as` at the profiled load a flame graph
    `<profile_as>-<connections>.svg`."""
    batches_before = read_claim_batches(service.root) if service.exposes_metrics else None
    meter = CpuMeter(service.process.pid, b.postmaster, b.url)
    profile = b.start_profile(profile_as, service, connections) if profile_as else None
    with run_env.watched_tables(b.url) as vacuum:
        meter.start()
        run = run_pilots(service.root, resources, connections, b.plan.seconds, pilot_life=b.plan.pilot_life)
        used = meter.stop()
    batches_after = None
    if service.exposes_metrics:
        # once the requests wrk left in flight are answered: each claim falls in one run's reading
        run_env.wait_idle(b.url, application_name=service.application_name)
        batches_after = read_claim_batches(service.root)
    used["wrk"] = used.pop("children")
    return {
        **run,
        "cpu_s": used,
        "cpu_ms_per_match": per_unit_ms(used, run["status"]["200"]),
        "cpu_ms_per_request": per_unit_ms(used, run["requests"]),
        "claim_batches": claim_batches(batches_before, batches_after),
        "profile": b.finish_profile(profile, f"{profile_as}, {connections} connections"),
        "vacuum": vacuum,
    }


def cpu_summary(run: dict) -> str:
    """`CPU ms/match service 1.23, PostgreSQL 0.45, wrk 0.06; claims per statement 1.8`."""
    ms = run.get("cpu_ms_per_match", {})
    sides = ", ".join(f"{label} {'—' if ms.get(k) is None else f'{ms[k]:.2f}'}"
                      for k, label in (("service", "service"), ("postgres", "PostgreSQL"), ("wrk", "wrk")))  # fmt: skip
    batches = run.get("claim_batches")
    mean = batches["mean"] if batches else None
    return f"CPU ms/match {sides}" + ("" if mean is None else f"; claims per statement {mean:.2f}")


def lean_comparison(fairmatch: dict, lean: dict) -> dict:
    """fairmatch as a fraction of the lean claim service: throughput at 64
    connections (fairmatch ÷ lean), p99 at 8 (fairmatch ÷ lean: how many times
    longer fairmatch's tail is), errors of each over the runs compared, and
    the two halves of each: the CPU per match of the service and of PostgreSQL."""
    fm64, lean64 = fairmatch.get("64", {}), lean.get("64", {})
    fm8, lean8 = fairmatch.get("8", {}), lean.get("8", {})

    def p99(run: dict) -> float | None:
        return run.get("latency_ms", {}).get("p99")

    compared = [c for c in ("64", "8") if c in fairmatch and c in lean]
    return {
        "fairmatch_matches_per_s_64": fm64.get("matches_per_s"),
        "lean_matches_per_s_64": lean64.get("matches_per_s"),
        "throughput_ratio_64": _ratio(fm64.get("matches_per_s"), lean64.get("matches_per_s")),
        "fairmatch_p99_ms_8": p99(fm8),
        "lean_p99_ms_8": p99(lean8),
        "p99_ratio_8": _ratio(p99(fm8), p99(lean8)),
        "fairmatch_errors": sum(errors(fairmatch[c]) for c in compared),
        "lean_errors": sum(errors(lean[c]) for c in compared),
        "fairmatch_cpu_ms_per_match": {c: fairmatch[c].get("cpu_ms_per_match") for c in compared},
        "lean_cpu_ms_per_match": {c: lean[c].get("cpu_ms_per_match") for c in compared},
    }


def lhcb_section(b: Bench) -> dict:
    """The workload submitted through POST /jobs as a site submits it, then the
    references (pgbench, then the lean claim service over wrk; no fairmatch
    server holding connections, the queue topped up by COPY), then fairmatch
    with wrk at 1, 8, 64 connections, the queue topped up through its API.
    Every wrk run starts from a queue topped up to the workload's size."""
    plan = b.plan
    workload = lhcb(plan.lhcb_scale, plan.seed)
    target = workload.total_jobs
    b.fresh_database()
    b.start_server()
    load = b.submit(workload, target)
    b.stop_server()
    run_env.analyze(b.url)
    resources = b.pilots_file(workload)
    out: dict = {"workload": describe(workload, scale=plan.lhcb_scale), "workers": plan.workers, "load": load,
                 "connections": {}, "bare_claims": {}, "legacy_runs": {}, "lean_runs": {}}  # fmt: skip
    for clients in plan.bare_clients:
        rows = b.fill(workload, target)
        with run_env.watched_tables(b.url) as vacuum:
            run = bare_claim(b.url, rows, clients, plan.seconds)
        out["bare_claims"][str(clients)] = {**run, "vacuum": vacuum}
        b.log(f"bare claim, {clients} clients, {rows:,} rows: {run['claims_per_s']:,.0f} claims/s"
              f"{' (ran dry)' if run['ran_dry'] else ''}")  # fmt: skip
    for clients in plan.legacy_clients:
        b.fill(workload, target)
        with run_env.watched_tables(b.url) as vacuum:
            run = legacy_dirac(b.url, clients, plan.seconds, resources)
        out["legacy_runs"][str(clients)] = {**run, "vacuum": vacuum}
        b.log(f"DIRAC matchAndGetJob SQL, {clients} clients: {run['matches_per_s']:,.0f} matches/s,"
              f" {run['delete_found_nothing']:,} lost races, {run['queue_emptied']:,} emptied queues")  # fmt: skip
    lean = b.start_lean()
    for connections in plan.lean_connections:
        waiting = b.fill(workload, target)
        run = measured_run(b, lean, resources, connections)
        out["lean_runs"][str(connections)] = {**run, "waiting_jobs": waiting, "workers": lean.workers,
                                              "pool": lean.pool}  # fmt: skip
        b.log(f"lean claim service, {connections} connections: {_summary(run)}; {cpu_summary(run)}")
    b.stop_server()
    server = b.start_server()
    for connections in plan.connections:
        top_up = b.submit(workload, target)
        waiting = run_env.waiting_jobs(b.url)
        run = measured_run(b, server, resources, connections, "lhcb")
        out["connections"][str(connections)] = {**run, "waiting_jobs": waiting, "top_up": top_up}
        b.log(f"fairmatch, {connections} connections: {_summary(run)}; {cpu_summary(run)}")
    b.stop_server()
    # the plot draws one line per reference: the best figure of each
    out["bare_claim"] = max(out["bare_claims"].values(), key=lambda r: r["claims_per_s"])
    out["legacy"] = max(out["legacy_runs"].values(), key=lambda r: r["matches_per_s"])
    if out["lean_runs"]:
        out["lean"] = max(out["lean_runs"].values(), key=lambda r: r["matches_per_s"])
        out["lean_comparison"] = lean_comparison(out["connections"], out["lean_runs"])
    return out


def _runs_per_size(
    b: Bench, workload: Workload, sizes: tuple[int, ...], label: str, measure_selection: bool = False
) -> tuple[dict[str, list], dict[str, dict]]:
    """wrk at each of the plan's scaling connection counts, per queue size (topped up
    before every run, a fresh server per size, each run measured by measured_run);
    with `measure_selection` (the diracx section), the selection alone too, and
    with --profile a flame graph `diracx-<size>-64.svg`. Returns the runs per
    connection count and the selection timings."""
    plan = b.plan
    resources = b.pilots_file(workload)
    runs: dict[str, list] = {str(c): [] for c in plan.scaling_connections}
    selection: dict[str, dict] = {}
    for size in sizes:
        b.fill(workload, size)
        server = b.start_server()  # recomputes the priorities
        if measure_selection:
            selection[str(size)] = selection_timing(b.url, resources)
            b.log(f"{label}{size:,} waiting: in-memory selection {selection[str(size)]}")
            if size == sizes[0]:  # the alternative, on the same TQs (it does not read the jobs)
                selection["sql"] = sql_selection_timing(b.url, resources)
                b.log(f"{label}SQL selection, median scan {selection['sql']['scan']['median_ms']} ms,"
                      f" GIN {selection['sql']['gin']['median_ms']} ms")  # fmt: skip
        for connections in plan.scaling_connections:
            waiting = b.fill(workload, size)
            profile_as = f"diracx-{size}" if measure_selection else None  # scaling is not profiled
            run = measured_run(b, server, resources, connections, profile_as)
            runs[str(connections)].append({**run, "waiting_jobs": size, "waiting_at_start": waiting,
                                           "p99_ms": run["latency_ms"]["p99"]})  # fmt: skip
            b.log(f"{label}{size:,} waiting, {connections} connections: {_summary(run)}; {cpu_summary(run)}")
    b.stop_server()
    return runs, selection


def scaling_section(b: Bench) -> dict:
    """Load the smallest size once, then top up; a fresh server per size."""
    plan = b.plan
    sizes = plan.scaling_sizes
    workload = lhcb(sizes[0] / LHCB_JOBS, plan.seed)
    b.fresh_database()
    b.load(workload)
    runs, _ = _runs_per_size(b, workload, sizes, "")
    main, *others = (str(c) for c in plan.scaling_connections)
    return {"workload": describe(workload), "runs": runs[main], "other_connections": {c: runs[c] for c in others}}


def diracx_section(b: Bench) -> dict:
    """The DiracX target (10,000 TQs, 1,000 sites, 300 tags, a long tail) loaded at
    the smallest size, then topped up; wrk at 64 and 8 connections per size with
    the same pilots (drawn from the smallest size); a fresh server per size; and the
    selection alone, in memory and in SQL."""
    plan = b.plan
    sizes = plan.diracx_sizes
    workload = diracx(sizes[0], plan.seed)
    b.fresh_database()
    b.load(workload)
    runs, selection = _runs_per_size(b, workload, sizes, "DiracX, ", measure_selection=True)
    sites, tags = len(workload.marginal("sites")), len(workload.marginal("tags"))
    return {
        "workload": describe(workload, sites=sites, tags=tags),
        "workers": plan.workers,
        "sizes": list(sizes),
        "runs": runs,
        "selection": selection,
        # the largest size over the smallest, per connection count
        "ratio": {
            c: _ratio(r[-1]["matches_per_s"], r[0]["matches_per_s"]) if len(r) > 1 else None for c, r in runs.items()
        },
    }
