"""How long the console's pages take with many task queues on PostgreSQL.

    python -m bench.console_pages [--task-queues 10000] [--jobs 200000] [--requests 20]
                                  [--database-url URL] [--vacuum]

Without --database-url a database of its own (`fairmatch_console_bench`) is created
beside $FAIRMATCH_BENCH_PG_URL (default postgresql://postgres@127.0.0.1:5432/postgres),
filled and dropped at the end. A database given is migrated, filled only when it holds
no task queue yet (one load then serves several runs) and kept.

The queues and their waiting jobs are queued through the service's own submission code
(`fairmatch.services.submission.submit`), in batches that each touch many queues as
users' submissions interleave; jobs spread over the queues as a power law (a few hold
thousands, most a handful) and over user priorities. One forced priority run then gives
every queue its priority and origin, and the tables are analysed as autoanalyze would
right after such a load (vacuumed too with --vacuum, as autovacuum later would). Then, in
the service, pilots of every site match and start a few thousand jobs and are sent away
empty a thousand times, and six hours of running-job samples are written: what the
overview, the sites page and the jobs pages read on a working service. Autovacuum is on
while the pages are timed, as on sites' servers.

Once start-up has settled, each page of PAGES is requested once to warm up, then
--requests times in turn, in process (httpx over ASGI to `create_app` with its lifespan
running: what the service does, without the socket), and its median and 95th percentile
are printed as a table.
A page is a name and a path whose `{placeholders}` name facts of the loaded data
(`facts`): add a line to PAGES to time another page.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import random
import statistics
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import psycopg
from sqlalchemy.ext.asyncio import AsyncEngine

from bench import run_env
from fairmatch.clock import utcnow
from fairmatch.db import migrate
from fairmatch.db.engine import create_engine
from fairmatch.jobs.models import JobSpec
from fairmatch.main import create_app
from fairmatch.services import history, priorities, submission
from fairmatch.settings import GivenSettings, Settings

DATABASE = "fairmatch_console_bench"
DEFAULT_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"

PAGES: list[tuple[str, str]] = [
    ("task queues, first page", "/ui/taskqueues"),
    ("task queues, filtered (group, site)", "/ui/taskqueues?group={group}&site={site}"),
    ("task queues, by oldest job", "/ui/taskqueues?sort=oldest&order=desc"),
    ("task queues, by waiting jobs", "/ui/taskqueues?sort=jobs&order=desc"),
    ("task queues, last page", "/ui/taskqueues?sort=id&page={last_page}"),
    ("task queue, the busiest", "/ui/taskqueues/{busiest}"),
    ("task queue, a typical one", "/ui/taskqueues/{typical}"),
    ("overview", "/ui/"),
    ("why not, a generic slot", "/ui/why-not?site={site}&cpu_time=86400&platform=x86_64-el9,x86_64-el7&tags=GPU"),
    ("why not, a narrow slot", "/ui/why-not?site={site}&cpu_time=3600&owner_group={group}"),
    ("shares", "/ui/shares"),
    ("sites and pilots", "/ui/sites"),
    ("jobs, first page", "/ui/jobs"),
    ("jobs, one owner's running", "/ui/jobs?owner={running_owner}&status=Running"),
    ("job, a running one", "/ui/jobs/{running_job}"),
    # the API's answers of the same figures, as JSON: the reference each page is measured against
    ("API: GET /status", "/api/v1/status"),
    ("API: GET /shares", "/api/v1/shares"),
    ("API: GET /associations/usage", "/api/v1/associations/usage"),
    ("API: GET /taskqueues (every queue)", "/api/v1/taskqueues"),
    ("API: GET /jobs?limit=50", "/api/v1/jobs?limit=50"),
]

GROUPS = ["lhcb_user", "lhcb_mc", "lhcb_data", "lhcb_calib", "lhcb_sprucing", "lhcb_pilot", "lhcb_sgm",
          "lhcb_gen", "lhcb_ana", "lhcb_prod"]  # fmt: skip
SITES = [f"LCG.Site{i:02d}.org" for i in range(60)]
PLATFORMS = ["x86_64-el7", "x86_64-el9", "aarch64-el9"]
TAGS = ["GPU", "MultiProcessor", "8Processors", "WholeNode"]
USER_PRIORITIES = ([1, 3, 5, 10], [0.7, 0.15, 0.1, 0.05])
OWNERS_PER_QUEUES = 20  # an owner has about this many queues
SKEW = 0.9  # the power law's exponent: the k-th busiest queue holds ~ 1 / k**SKEW of the jobs
# Before timing: at start-up the matcher's keeper reads every queue and the background loops
# take their first turn, which the first requests would otherwise wait behind.
SETTLE_SECONDS = 3.0
# a working service's other state, which the overview and the sites page read: jobs matched
# and running through pilots of several sites (some sent away empty), and the running-job
# samples of the chart's hours
PILOTS = 300
RUNNING_JOBS = 3_000
EMPTY_MATCHES = 1_000
SAMPLES = 360  # one a minute over the console's default six hours


def definitions(count: int, rng: random.Random) -> list[dict[str, Any]]:
    """`count` distinct queue definitions: owners in groups, and a few sites, platforms and tags each."""
    owners = max(1, count // OWNERS_PER_QUEUES)
    found: dict[tuple, dict[str, Any]] = {}
    while len(found) < count:
        owner = rng.randrange(owners)
        spec = {
            "owner": f"user{owner:05d}",
            "owner_group": GROUPS[owner % len(GROUPS)],
            "cpu_time": rng.choice([3600, 21600, 86400]),
            "sites": sorted(rng.sample(SITES, rng.choice([0, 1, 2, 3]))),
            "platforms": sorted(rng.sample(PLATFORMS, rng.choice([0, 1]))),
            "tags": sorted(rng.sample(TAGS, rng.choice([0, 0, 1, 2]))),
        }
        found.setdefault(tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in spec.items()), spec)
    return list(found.values())


def jobs_per_queue(queues: int, jobs: int) -> list[int]:
    """At least one job each, the rest by a power law."""
    weights = [1 / (k + 1) ** SKEW for k in range(queues)]
    spare, total = max(0, jobs - queues), sum(weights)
    counts = [1 + math.floor(spare * w / total) for w in weights]
    counts[0] += max(0, jobs - sum(counts))
    return counts


def submissions(
    specs: list[dict[str, Any]], counts: list[int], batch: int, rng: random.Random
) -> Iterator[list[JobSpec]]:
    """The jobs in shuffled order, `batch` per submission."""
    order = [i for i, n in enumerate(counts) for _ in range(n)]
    rng.shuffle(order)
    for start in range(0, len(order), batch):
        yield [
            JobSpec(**specs[i], user_priority=rng.choices(*USER_PRIORITIES)[0], priority_class=0)
            for i in order[start : start + batch]
        ]


async def fill(settings: Settings, task_queues: int, jobs: int, seed: int) -> None:
    rng = random.Random(seed)
    specs = definitions(task_queues, rng)
    counts = jobs_per_queue(task_queues, jobs)
    engine = create_engine(settings.database_url)
    try:
        async with engine.connect() as conn:
            queued = 0
            for part in submissions(specs, counts, settings.jobs.max_batch, rng):
                await submission.submit(conn, part, settings, by="bench")
                queued += len(part)
                print(f"  {queued:,} jobs queued", file=sys.stderr)
            corrections = priorities.configured_corrections(settings.priority)
            await priorities.recompute(conn, settings, corrections, runner="bench", scheduled=False)
    finally:
        await engine.dispose()


def facts(url: str, page_size: int) -> dict[str, Any]:
    """What PAGES' paths may name: queues, a group and a site of the data, the last page."""

    def one(statement: str) -> Any:
        return run_env.query(url, statement)[0][0]

    queues = one("SELECT count(*) FROM task_queues")
    return {
        "busiest": one("SELECT tq_id FROM tq_jobs GROUP BY tq_id ORDER BY count(*) DESC LIMIT 1"),
        "typical": one("SELECT id FROM task_queues ORDER BY id OFFSET (SELECT count(*) / 2 FROM task_queues) LIMIT 1"),
        "group": GROUPS[0],
        "site": SITES[7],
        "last_page": max(1, -(-queues // page_size)),
        "task_queues": queues,
        "waiting_jobs": one("SELECT count(*) FROM tq_jobs"),
    }


async def run_pilots(client: httpx.AsyncClient, rng: random.Random) -> None:
    """Pilots of every site take RUNNING_JOBS jobs and start them; others are sent away empty."""
    for n in range(RUNNING_JOBS + EMPTY_MATCHES):
        empty = n >= RUNNING_JOBS  # a CPU time no queue fits in
        pilot = {"Site": rng.choice(SITES), "CPUTime": 60 if empty else 100_000, "JobType": "any",
                 "Platform": PLATFORMS, "Tag": TAGS, "PilotReference": f"https://ce.example/pilot-{n % PILOTS}"}  # fmt: skip
        answer = await client.post("/api/v1/match", json=pilot)
        if answer.status_code == 200:
            started = await client.post(f"/api/v1/jobs/{answer.json()['job_id']}/status", json={"status": "Running"})
            started.raise_for_status()
        elif answer.status_code != 204:
            raise SystemExit(f"/match answered {answer.status_code}: {answer.text[:500]}")


async def time_pages(
    settings: Settings, url: str, known: dict[str, Any], requests: int, seed: int
) -> list[dict[str, Any]]:
    app = create_app(settings)
    results = []
    async with app.router.lifespan_context(app):
        await asyncio.sleep(SETTLE_SECONDS)
        transport = httpx.ASGITransport(app=app)  # from 127.0.0.1: mode `none` serves it as admin
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            if run_env.query(url, "SELECT count(*) FROM jobs WHERE status = 'Running'")[0][0] == 0:
                print(f"{RUNNING_JOBS:,} jobs matched and started, {EMPTY_MATCHES:,} empty matches", file=sys.stderr)
                await run_pilots(client, random.Random(seed))
                await asyncio.sleep(SETTLE_SECONDS)  # the empty matches' tally is written
                await take_samples(app.state.process.engine)
            known.update(running(url))
            for name, template in PAGES:
                path = template.format(**known)
                first = await client.get(path)  # warm-up: templates compiled, statements prepared
                times = []
                for _ in range(requests):
                    started = time.perf_counter()
                    answer = await client.get(path)
                    times.append((time.perf_counter() - started) * 1000)
                    if answer.status_code != 200:
                        raise SystemExit(f"{path} answered {answer.status_code}: {answer.text[:500]}")
                times.sort()
                results.append({
                    "page": name, "path": path, "bytes": len(first.content), "median": statistics.median(times),
                    "p95": times[max(0, math.ceil(0.95 * len(times)) - 1)], "max": times[-1],
                })  # fmt: skip
    return results


async def take_samples(engine: AsyncEngine) -> None:
    """The chart's hours of samples: the jobs running now, as if sampled once a minute."""
    now = utcnow()
    async with engine.connect() as conn:
        for minute in range(SAMPLES, 0, -1):
            await history.sample(conn, now - timedelta(minutes=minute), 0, 0, reported_seconds=0)


def running(url: str) -> dict[str, Any]:
    """A running job and its owner, for the pages that show them."""
    job, owner = run_env.query(url, "SELECT id, owner FROM jobs WHERE status = 'Running' ORDER BY id LIMIT 1")[0]
    return {"running_job": job, "running_owner": owner}


def table(results: list[dict[str, Any]], known: dict[str, Any], requests: int) -> str:
    lines = [
        f"{known['task_queues']:,} task queues, {known['waiting_jobs']:,} waiting jobs; {requests} requests per page",
        "",
        "| page | path | KiB | median ms | p95 ms | max ms |",
        "|---|---|---:|---:|---:|---:|",
    ]
    lines += [f"| {r['page']} | `{r['path']}` | {r['bytes'] / 1024:.0f} | {r['median']:.1f} | {r['p95']:.1f} | "
              f"{r['max']:.1f} |" for r in results]  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task-queues", type=int, default=10_000)
    parser.add_argument("--jobs", type=int, default=200_000, help="waiting jobs (at least one per queue)")
    parser.add_argument("--requests", type=int, default=20, help="timed requests per page")
    parser.add_argument("--database-url", help="a PostgreSQL database to use and keep (default: one made and dropped)")
    parser.add_argument("--vacuum", action="store_true", help="VACUUM the loaded tables, not only ANALYZE them")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    admin_url = os.environ.get("FAIRMATCH_BENCH_PG_URL", DEFAULT_ADMIN_URL)
    if args.database_url:
        url = args.database_url
        migrate.upgrade(url)
    else:
        url = run_env.reset_database(admin_url, DATABASE)
    # these settings alone: neither the environment nor a settings file changes what is measured
    settings = GivenSettings(database_url=url)
    try:
        if run_env.query(url, "SELECT count(*) FROM task_queues")[0][0] == 0:
            print(f"queueing {args.jobs:,} jobs in {args.task_queues:,} task queues", file=sys.stderr)
            started = time.perf_counter()
            asyncio.run(fill(settings, args.task_queues, args.jobs, args.seed))
            print(f"  loaded in {time.perf_counter() - started:.0f} s", file=sys.stderr)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"{'VACUUM ' if args.vacuum else ''}ANALYZE {', '.join(run_env.HOT_TABLES)}")
        known = facts(url, settings.console.page_size)
        # sites' servers run autovacuum: on while the pages are timed, the server's own setting back after
        with run_env.autovacuum_on(admin_url, lambda line: print(line, file=sys.stderr)):
            results = asyncio.run(time_pages(settings, url, known, args.requests, args.seed))
        print(table(results, known, args.requests))
    finally:
        if not args.database_url:
            run_env.drop_database(admin_url, DATABASE)


if __name__ == "__main__":
    main()
