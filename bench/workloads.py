"""The workloads: LHCb's task queues (generated from the snapshot's distributions
in the shared workloads directory) and DiracX's target shape (10,000 task queues
with a long tail), the pilots that ask for their jobs, and their submission
through POST /jobs, the one way jobs enter the service."""

from __future__ import annotations

import csv
import json
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import Any

import httpx

from bench.env import REPO, query

SNAPSHOT = "lhcb-2026-03-28"
# each queue's jobs over user priorities: most at the default 1, some raised by their
# owners, so every queue of more than a handful of jobs holds several levels
USER_PRIORITIES = {1: 0.60, 2: 0.25, 3: 0.15}
# what a job carries besides its requirements; DIRAC keeps the JDL there
PAYLOAD = {"executable": "dirac-jobexec", "arguments": "jobDescription.xml -o LogLevel=INFO"}
BATCH, CLIENTS, RETRIES = 1000, 2, 3  # jobs per POST /jobs, concurrent submitters, retries of a 503


@dataclass(frozen=True)
class Workload:
    name: str
    specs: tuple[dict[str, Any], ...]  # one job spec per task queue, as POST /jobs takes it
    jobs: tuple[int, ...]  # waiting jobs per task queue at full size
    sites: dict[str, float]  # value -> weight, for pilots of queues that leave a field open
    platforms: dict[str, float]
    cpu_times: dict[int, float]  # pilots' CPU lengths (s) -> weight
    tags: dict[str, float] = field(default_factory=dict)
    ram_mb: dict[int, float] = field(default_factory=dict)  # pilots' MaxRAM -> weight; empty: none sent

    @property
    def total_jobs(self) -> int:
        return sum(self.jobs)

    def describe(self) -> dict:
        return {"name": self.name, "task_queues": len(self.specs), "jobs": self.total_jobs,
                "user_priorities": USER_PRIORITIES}  # fmt: skip


def _draw(rng: random.Random, weights: dict, k: int, exclude: Sequence = ()) -> list:
    """k distinct values by weight, none of `exclude` (fewer when there are not that many)."""
    values = [v for v in weights if v not in exclude]
    cumulative = list(accumulate(weights[v] for v in values))
    picked: list = []
    for _ in range(50 * k):
        if len(picked) == k or not values:
            break
        (v,) = rng.choices(values, cum_weights=cumulative)
        if v not in picked:
            picked.append(v)
    return picked


def _apportion(weights: Sequence[float], total: int) -> list[int]:
    """Integers proportional to `weights` summing to `total` (largest remainder)."""
    exact = [total * w / sum(weights) for w in weights]
    counts = [int(x) for x in exact]
    for i in sorted(range(len(exact)), key=lambda i: counts[i] - exact[i])[: total - sum(counts)]:
        counts[i] += 1
    return counts


def workloads_dir() -> Path:
    """$FAIRMATCH_WORKLOADS_DIR, else shared/workloads beside the repository."""
    return Path(os.environ.get("FAIRMATCH_WORKLOADS_DIR") or REPO.parent / "shared" / "workloads")


def _csv(name: str) -> list[dict[str, str]]:
    path = workloads_dir() / SNAPSHOT / name
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: set FAIRMATCH_WORKLOADS_DIR to the directory holding {SNAPSHOT}/")
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _blocks(rows: list[dict[str, str]], key: str) -> list[tuple[list[str], int]]:
    """Values listed by the same number of queues with the same jobs go together
    (one site list, one platform family): (values, queues listing them)."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for r in rows:
        grouped.setdefault((r["n_tqs"], r["total_jobs"]), []).append(r[key])
    return [(values, int(n)) for (n, _), values in grouped.items()]


def lhcb(scale: float = 1.0, seed: int = 0) -> Workload:
    """Every queue of the snapshot (its CPU time, group and size times `scale`), its owner,
    job type, sites, banned sites and platforms drawn so that each value is listed by about
    as many queues as the snapshot says."""
    rng = random.Random(f"lhcb:{seed}")
    tqs = _csv("jobs_per_tq.csv")
    n = len(tqs)
    owners: dict[str, dict[str, float]] = {}
    for r in _csv("owner_distribution.csv"):
        owners.setdefault(r["OwnerGroup"], {})[r["Owner"]] = float(r["total_jobs"])
    job_types = {r["job_type"]: float(r["n_tqs"]) for r in _csv("jobtype_distribution.csv")}
    anywhere = int(_csv("site_any.csv")[0]["tqs_any_site"])

    def listing(rows: list[dict[str, str]], key: str, among: Sequence[int]) -> list[list[str]]:
        values: list[list[str]] = [[] for _ in range(n)]
        for block, k in _blocks(rows, key):
            for i in rng.sample(list(among), min(k, len(among))):
                values[i] += block
        return values

    everyone = range(n)
    open_site = set(rng.sample(list(everyone), anywhere))
    sites = listing(_csv("site_distribution.csv"), "site", [i for i in everyone if i not in open_site])
    banned = listing(_csv("banned_sites.csv"), "banned_site", list(everyone))
    platforms = listing(_csv("platform_distribution.csv"), "platform", list(everyone))
    site_weights = {r["site"]: float(r["total_jobs"]) for r in _csv("site_distribution.csv")}
    platform_weights = {r["platform"]: float(r["total_jobs"]) for r in _csv("platform_distribution.csv")}
    specs = []
    for i, row in enumerate(tqs):
        listed = sorted(set(sites[i])) or ([] if i in open_site else _draw(rng, site_weights, 1))
        group = row["OwnerGroup"]
        specs.append({
            "owner": _draw(rng, owners.get(group) or {"lbprods": 1.0}, 1)[0], "owner_group": group, "vo": "lhcb",
            "cpu_time": int(row["CPUTime"]), "sites": listed,
            "banned_sites": sorted(set(banned[i]) - set(listed)),
            "platforms": sorted(set(platforms[i])) or _draw(rng, platform_weights, 1),
            "job_types": _draw(rng, job_types, 1),
        })  # fmt: skip
    cpu_times = {int(r["cpu_segment_seconds"]): float(r["total_jobs"]) for r in _csv("cputime_distribution.csv")}
    return Workload("lhcb", tuple(specs), tuple(max(1, round(int(r["n_jobs"]) * scale)) for r in tqs),
                    site_weights, platform_weights, cpu_times)  # fmt: skip


def diracx(jobs: int, seed: int = 0, n_tqs: int = 10_000, n_sites: int = 1000, n_tags: int = 300) -> Workload:
    """DiracX's target: `n_tqs` queues (fewer when there are fewer jobs), 1,000 sites, 300 tags;
    sizes and popularities Zipf-like (weight 1/rank): a few productions hold most jobs, a long
    tail of users' niche queues holds a few each."""
    rng = random.Random(f"diracx:{seed}")
    n_tqs = min(n_tqs, jobs)
    sites = {f"{('LCG', 'DIRAC', 'ARC', 'CLOUD')[i % 4]}.Site{i:04d}.org": 1 / (i + 1) for i in range(n_sites)}
    tags = {f"tag{i:03d}": 1 / (i + 1) for i in range(n_tags)}
    platforms = {"x86_64-el9": 45.0, "x86_64_v2-el9": 20.0, "x86_64_v3-el9": 15.0, "x86_64-el8": 12.0,
                 "aarch64-el9": 8.0}  # fmt: skip
    cpu_times = {3600: 5.0, 21600: 15.0, 43200: 15.0, 86400: 30.0, 172800: 20.0, 259200: 10.0}
    ram = {2000: 40.0, 4000: 30.0, 8000: 20.0, 16000: 10.0}
    specs, seen = [], set()
    for rank in range(n_tqs):
        vo = rng.choices(("vo1", "vo2", "vo3"), (60, 30, 10))[0]
        user = rank > n_tqs // 100 and rng.random() < 0.6  # the biggest queues are productions
        spec = {
            "owner": f"{vo}user{min(int(rng.paretovariate(1.0)), 200):03d}" if user else f"{vo}prod",
            "owner_group": f"{vo}_{'user' if user else 'prod'}", "vo": vo,
            "cpu_time": rng.choices(list(cpu_times), list(cpu_times.values()))[0],
            "sites": sorted(_draw(rng, sites, rng.choices((0, 1, 2, 3), (10, 50, 25, 15))[0])),
            "platforms": sorted(_draw(rng, platforms, rng.choice((0, 1, 1, 2, 2, 3)))),
            "job_types": [rng.choice(("User", "Analysis") if user else ("MCSimulation", "Reconstruction", "Merge"))],
            "tags": sorted(_draw(rng, tags, rng.choices((0, 1, 2, 3), (55, 25, 12, 8))[0])),
        }  # fmt: skip
        if rng.random() < 0.2:  # a fifth of the queues need a memory range
            spec["min_ram_mb"] = rng.choices(list(ram), list(ram.values()))[0]
            spec["max_ram_mb"] = 2 * spec["min_ram_mb"]
        while (key := json.dumps(spec, sort_keys=True)) in seen:  # a niche queue drawn twice asks for one tag more
            spec["tags"] = sorted({*spec["tags"], *_draw(rng, tags, 1, spec["tags"])})
        seen.add(key)
        specs.append(spec)
    sizes = _apportion([1 / (rank + 1) for rank in range(n_tqs)], jobs - n_tqs)
    return Workload("diracx", tuple(specs), tuple(s + 1 for s in sizes), sites, platforms, cpu_times, tags,
                    {2000: 15.0, 4000: 35.0, 8000: 30.0, 16000: 15.0, 32000: 5.0})  # fmt: skip


def pilots(workload: Workload, n: int, seed: int = 0) -> list[bytes]:
    """`n` DIRAC resource descriptions (JSON), each from a queue picked by its jobs, as pilots
    are submitted for the waiting jobs: the queue's site or a popular one it does not ban,
    a CPU length at least the queue's, a few platforms, every job type, tags, memory, power."""
    rng = random.Random(f"pilots:{workload.name}:{seed}")
    job_types = sorted({t for s in workload.specs for t in s["job_types"]})
    out = []
    for spec in rng.choices(workload.specs, weights=workload.jobs, k=n):
        longer = {c: w for c, w in workload.cpu_times.items() if c >= spec["cpu_time"]} or {spec["cpu_time"]: 1.0}
        platforms = [rng.choice(spec["platforms"])] if spec.get("platforms") else _draw(rng, workload.platforms, 1)
        resource: dict[str, Any] = {
            "Site": rng.choice(spec["sites"]) if spec.get("sites")
            else _draw(rng, workload.sites, 1, spec.get("banned_sites", ()))[0],
            "CPUTime": rng.choices(list(longer), list(longer.values()))[0],
            "Platform": sorted({*platforms, *_draw(rng, workload.platforms, rng.randint(0, 2))}),
            "JobType": job_types, "PilotBenchmark": round(rng.uniform(5.0, 30.0), 2),
        }  # fmt: skip
        if workload.tags:
            resource["Tag"] = sorted({*spec.get("tags", ()), *_draw(rng, workload.tags, rng.randint(0, 3))})
        if workload.ram_mb:
            enough = {m: w for m, w in workload.ram_mb.items() if m >= spec.get("min_ram_mb", 0)}
            resource["MaxRAM"] = rng.choices(list(enough), list(enough.values()))[0]
        out.append(json.dumps(resource, separators=(",", ":")).encode())
    return out


def submit(api: str, url: str, workload: Workload, target: int, rng: random.Random,
           log: Callable[[str], object] | None = None) -> dict:  # fmt: skip
    """Submit through POST /jobs until `target` jobs wait: each queue's share in proportion to
    the workload's sizes, each job's user priority drawn from USER_PRIORITIES, the order
    shuffled so that a batch mixes queues as submissions do. Returns jobs sent and rate."""
    add = target - query(url, "SELECT count(*) FROM tq_jobs")[0][0]
    if add <= 0:
        return {"jobs": 0, "seconds": 0.0, "jobs_per_s": None}
    levels, shares = list(USER_PRIORITIES), list(USER_PRIORITIES.values())
    jobs = [(i, rng.choices(levels, shares)[0]) for i, k in enumerate(_apportion(workload.jobs, add)) for _ in range(k)]
    rng.shuffle(jobs)
    bodies = iter([json.dumps({"jobs": [{**workload.specs[i], "user_priority": p, "payload": PAYLOAD}
                                        for i, p in jobs[at : at + BATCH]]}).encode()
                   for at in range(0, len(jobs), BATCH)])  # fmt: skip
    lock, failures = threading.Lock(), Counter()
    started = last = time.perf_counter()
    sent = 0

    def client() -> None:
        nonlocal sent, last
        with httpx.Client(timeout=600, headers={"content-type": "application/json"}) as http:
            while (body := next(bodies, None)) is not None:
                for _ in range(RETRIES + 1):
                    r = http.post(f"{api}/jobs", content=body)
                    if r.status_code != 503:  # 503 says "retry shortly"
                        break
                with lock:
                    sent += BATCH
                    if r.status_code != 201:
                        failures[f"{r.status_code}: {r.text[:200]}"] += 1
                    if log and time.perf_counter() - last > 15:
                        last = time.perf_counter()
                        log(f"submitted {min(sent, len(jobs)):,} of {len(jobs):,} jobs through POST /jobs")

    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise RuntimeError(f"POST /jobs failed: {dict(failures)}")
    seconds = time.perf_counter() - started
    return {"jobs": len(jobs), "seconds": round(seconds, 2), "jobs_per_s": round(len(jobs) / seconds)}
