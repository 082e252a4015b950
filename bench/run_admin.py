"""The non-matching sections: bulk submission over POST /jobs and the
priority recompute of the DiracX-target workload."""

from __future__ import annotations

import json
import random
import statistics
from datetime import datetime

from bench import run_env
from bench.run_match import describe
from bench.run_plan import Bench
from bench.workload_api import PAYLOAD, post_jobs
from bench.workloads import Workload, diracx, lhcb

DISTINCT_BODIES = 4  # request bodies encoded up front and sent in turn


def _bodies(workload: Workload, batch: int, seed: int) -> list[bytes]:
    """Batches of jobs like the workload's: each TQ's spec drawn as often as it
    holds jobs, its user priority drawn from the workload's mix."""
    rng = random.Random(f"submit:{seed}")
    specs, weights = list(workload.specs), list(workload.jobs)
    levels, shares = zip(*workload.user_priorities)

    def job(spec: dict) -> dict:
        return {**spec, "user_priority": rng.choices(levels, shares)[0], "payload": PAYLOAD}

    return [
        json.dumps(
            {"jobs": [job(spec) for spec in rng.choices(specs, weights, k=batch)]}, separators=(",", ":")
        ).encode()
        for _ in range(DISTINCT_BODIES)
    ]


def submit(api: str, bodies: list[bytes], batch: int, batches: int, clients: int) -> dict:
    """`batches` POST /jobs of `batch` jobs each, from `clients` threads at once."""
    seconds, failures, _, wall = post_jobs(api, (bodies[i % len(bodies)] for i in range(batches)), clients)
    accepted = len(seconds) * batch
    return {
        "clients": clients, "batch": batch, "batches": batches, "jobs": accepted, "seconds": round(wall, 3),
        "jobs_per_s": accepted / wall, "batch_seconds_median": statistics.median(seconds) if seconds else None,
        "batch_seconds_max": max(seconds, default=None), "failed_batches": len(failures), "failures": failures[:5],
    }  # fmt: skip


def submit_section(b: Bench) -> dict:
    """Into a database already holding the LHCb workload, so most jobs join existing TQs."""
    plan = b.plan
    workload = lhcb(plan.lhcb_scale, plan.seed)
    b.fresh_database()
    b.load(workload)
    server = b.start_server()
    bodies = _bodies(workload, plan.submit_batch, plan.seed)
    out = {"workload": describe(workload, scale=plan.lhcb_scale), "body_mib": round(len(bodies[0]) / 2**20, 1),
           "runs": {}}  # fmt: skip
    for clients in plan.submit_clients:
        run = out["runs"][str(clients)] = submit(server.api, bodies, plan.submit_batch, plan.submit_batches, clients)
        b.log(f"submission, {clients} client{'s' * (clients > 1)}: {run['jobs']:,} jobs in {run['seconds']:.1f} s,"
              f" {run['jobs_per_s']:,.0f} jobs/s, {run['failed_batches']} failed batches")  # fmt: skip
    b.stop_server()
    return out


def _server_seconds(answer: dict) -> float:
    started, finished = (datetime.fromisoformat(answer[k]) for k in ("started_at", "finished_at"))
    return (finished - started).total_seconds()


def recompute_section(b: Bench) -> dict:
    """The first size is loaded, the next ones topped up (same TQs, more jobs);
    a fresh server per size, whose start-up recompute is the warm-up."""
    plan = b.plan
    runs = []
    for i, jobs in enumerate(plan.recompute_jobs):
        workload = diracx(jobs, plan.seed)
        if i == 0:
            b.fresh_database()
            b.load(workload)
        else:
            b.fill(workload, jobs)
        tqs = run_env.query(b.url, "SELECT count(*) FROM task_queues")[0][0]
        if tqs != len(workload.specs):
            raise RuntimeError(f"{tqs} TQs in the database, the workload has {len(workload.specs)}")
        server = b.start_server()
        client, answers = [], []
        for _ in range(plan.recompute_repeats):
            seconds, answer = server.recompute()
            client.append(seconds)
            answers.append(answer)
        server_side = [_server_seconds(a) for a in answers]
        run = {"workload": describe(workload), "task_queues": tqs, "jobs": run_env.waiting_jobs(b.url),
               "repeats": len(client), "seconds": client, "median_s": statistics.median(client),
               "server_seconds": server_side, "server_median_s": statistics.median(server_side),
               "changed": [a["changed"] for a in answers]}  # fmt: skip
        runs.append(run)
        b.log(f"recompute, {tqs:,} TQs, {run['jobs']:,} jobs: median {run['median_s']:.3f} s"
              f" (server {run['server_median_s']:.3f} s) over {len(client)} runs")  # fmt: skip
    b.stop_server()
    return {"runs": runs}
