"""Submitting a workload through `POST /jobs`, as a site's submitters do.

The one way the benchmark sends jobs to the service: the `lhcb` section loads
its queue and tops it up with it, `lifecycle` tops up its backlog, `submit`
times bulk batches with `post_jobs`. A top-up adds each TQ's jobs in
proportion to the workload's sizes and brings the user-priority levels back
to the workload's mix, as the COPY loader's top-up does
(`bench/workload_load.py`).
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import NamedTuple

import httpx

from bench import run_env
from bench.workload_fit import apportion
from bench.workload_load import top_up_mix
from bench.workload_model import LevelSplit, Workload

# what a job carries besides its requirements; DIRAC keeps the JDL there
PAYLOAD = {"executable": "dirac-jobexec", "arguments": "jobDescription.xml -o LogLevel=INFO"}
# jobs per POST /jobs when loading as a site does: a production agent's bulk
# (DIRAC and DiracX cap a user's parametric submission at 20 jobs)
SITE_BATCH = 100
SUBMIT_CLIENTS = 2  # concurrent submitters
SUBMIT_RETRIES = 3  # a 503 says "retry shortly": the submitting client does
PROGRESS_SECONDS = 15  # how often a long load through the API says how far it got


class Posted(NamedTuple):
    seconds: list[float]  # of each accepted POST, its retries included
    failures: list[str]  # status and text of each refused one
    retried: int  # answers 503 tried again
    wall: float


def post_jobs(api: str, bodies: Iterator[bytes], clients: int, retries: int = 0) -> Posted:
    """POST every body to /jobs from `clients` threads at once. A 503 says "retry shortly":
    with `retries`, a client does, that many times at most."""
    lock, seconds, failures, retried = threading.Lock(), [], [], 0

    def client() -> None:
        nonlocal retried
        with httpx.Client(timeout=600, headers={"content-type": "application/json"}) as http:
            while True:
                with lock:
                    body = next(bodies, None)
                if body is None:
                    return
                started = time.perf_counter()
                for attempt in range(retries + 1):
                    r = http.post(f"{api}/jobs", content=body)
                    if r.status_code != 503 or attempt == retries:
                        break
                    with lock:
                        retried += 1
                took = time.perf_counter() - started
                with lock:
                    if r.status_code == 201:
                        seconds.append(took)
                    else:
                        failures.append(f"{r.status_code}: {r.text[:200]}")

    threads = [threading.Thread(target=client) for _ in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return Posted(seconds, failures, retried, time.perf_counter() - started)


def top_up_jobs(workload: Workload, by_level: Mapping[int, int], target: int) -> list[tuple[int, int]]:
    """(TQ index, user priority) of the jobs that bring the waiting jobs to
    `target`, spread as the loader's top-up spreads them: over the TQs in
    proportion to the workload's sizes, and over the levels that lack jobs
    against the mix (matching drains the higher ones first), so that every run
    starts from the same level mix."""
    add = target - sum(by_level.values())
    if add <= 0:
        return []
    split = LevelSplit(top_up_mix(workload.user_priorities, by_level, target))
    jobs = []
    for i, n in enumerate(apportion(workload.jobs, add)):
        for priority, k in split.split(n) if n else ():
            jobs += [(i, priority)] * k
    return jobs


def job_bodies(workload: Workload, jobs: Sequence[tuple[int, int]], batch: int) -> Iterator[bytes]:
    """POST /jobs bodies of up to `batch` jobs: each the TQ's spec with its user
    priority and the payload."""
    for start in range(0, len(jobs), batch):
        specs = [{**workload.specs[i], "user_priority": p, "payload": PAYLOAD} for i, p in jobs[start : start + batch]]
        yield json.dumps({"jobs": specs}, separators=(",", ":")).encode()


def api_top_up(
    api: str, url: str, workload: Workload, target: int, batch: int, rng: random.Random,
    log: Callable[[str], object] | None = None,
) -> dict:  # fmt: skip
    """Submit through the API until `target` jobs wait (their order shuffled, so
    a batch mixes TQs as submissions do); an empty database is loaded whole; with
    `log`, a line every PROGRESS_SECONDS. Returns the jobs sent, the wall seconds
    and the submission rate."""
    by_level = dict(run_env.query(url, "SELECT user_priority, count(*) FROM tq_jobs GROUP BY user_priority"))
    jobs = top_up_jobs(workload, by_level, target)
    rng.shuffle(jobs)
    bodies = job_bodies(workload, jobs, batch)
    if log is not None:
        bodies = _logged(bodies, len(jobs), batch, log)
    posted = post_jobs(api, bodies, SUBMIT_CLIENTS, SUBMIT_RETRIES)
    if posted.failures:
        raise RuntimeError(f"{len(posted.failures)} POST /jobs failed: {posted.failures[:3]}")
    return {"jobs": len(jobs), "batch": batch, "clients": SUBMIT_CLIENTS, "seconds": round(posted.wall, 3),
            "jobs_per_s": len(jobs) / posted.wall if jobs else None, "retried_503": posted.retried}  # fmt: skip


def _logged(bodies: Iterator[bytes], total: int, batch: int, log: Callable[[str], object]) -> Iterator[bytes]:
    """`bodies`, saying every PROGRESS_SECONDS how many jobs were handed to the clients."""
    started = last = time.perf_counter()
    for sent, body in enumerate(bodies):
        if (now := time.perf_counter()) - last >= PROGRESS_SECONDS:
            jobs = min(sent * batch, total)
            log(f"submitting through POST /jobs: {jobs:,} of {total:,} jobs ({jobs / (now - started):,.0f}/s)")
            last = now
        yield body
