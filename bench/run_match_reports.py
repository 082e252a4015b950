"""Sequential matches and reports through the service, in process, on SQLite or PostgreSQL.

    python -m bench.run_match_reports [--backend sqlite|postgresql] [--jobs 3000]
                                      [--matches 2000] [--rounds 3]

Per round a fresh database gets `--jobs` waiting jobs over a few task queues,
queued and prioritised by the service's own code. Then one client, in process
(httpx over ASGI to `create_app` with its lifespan running: the service without
the socket), sends `--matches` times a pilot's POST /match (naming its pilot, so
the pilot record is written with the claim) and, for the job it got, the pilot's
report that it runs: each request waits for the one before. Prints per round the
matches per second and the CPU time of this process (all its threads: SQLite runs in
a thread of its own) per match and report, and their medians as JSON. On a machine
shared with other work the CPU time is the steadier figure.

SQLite: a database file in a temporary directory. PostgreSQL: a database of its own
(`fairmatch_match_reports_bench`) beside $FAIRMATCH_BENCH_PG_URL (default
postgresql://postgres@127.0.0.1:5432/postgres), dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from bench import run_env
from fairmatch.db import migrate
from fairmatch.db.engine import create_engine
from fairmatch.jobs.models import JobSpec
from fairmatch.main import create_app
from fairmatch.services import priorities, submission
from fairmatch.settings import GivenSettings, Settings

DATABASE = "fairmatch_match_reports_bench"
DEFAULT_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
OWNERS = 8  # one task queue each


async def _fill(settings: Settings, jobs: int) -> None:
    specs = [
        JobSpec(owner=f"u{n % OWNERS}", owner_group="bench", user_priority=1 + n % 3, priority_class=0)
        for n in range(jobs)
    ]
    engine = create_engine(settings.database_url, pool_size=1)
    try:
        async with engine.connect() as conn:
            for start in range(0, len(specs), 1000):
                await submission.submit(conn, specs[start : start + 1000], settings, by="bench")
            corrections = priorities.configured_corrections(settings.priority)
            await priorities.recompute(conn, settings, corrections, runner="bench", scheduled=False)
    finally:
        await engine.dispose()


async def _pilots(settings: Settings, matches: int) -> tuple[float, float]:
    """Seconds and CPU seconds for `matches` matches, each followed by its job's Running report."""
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)  # from 127.0.0.1: served as admin without auth
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            started, cpu = time.perf_counter(), time.process_time()
            for n in range(matches):
                pilot = {"Site": "BENCH.site.org", "CPUTime": 10**6, "PilotReference": f"pilot-{n % 50}"}
                answer = await client.post("/api/v1/match", json=pilot)
                if answer.status_code != 200:
                    raise SystemExit(f"/match answered {answer.status_code} (ask for more --jobs): {answer.text[:300]}")
                job_id = answer.json()["job_id"]
                report = await client.post(f"/api/v1/jobs/{job_id}/status", json={"status": "Running"})
                report.raise_for_status()
            return time.perf_counter() - started, time.process_time() - cpu


def _round(url: str, args: argparse.Namespace) -> tuple[float, float]:
    """Matches per second and CPU ms a match (with its report) of one round on a fresh database at `url`."""
    migrate.upgrade(url)
    settings = GivenSettings(database_url=url)
    asyncio.run(_fill(settings, args.jobs))
    seconds, cpu = asyncio.run(_pilots(settings, args.matches))
    return args.matches / seconds, cpu / args.matches * 1000


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--matches", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    admin_url = os.environ.get("FAIRMATCH_BENCH_PG_URL", DEFAULT_ADMIN_URL)
    rates, cpu = [], []
    for n in range(args.rounds):
        if args.backend == "sqlite":
            with tempfile.TemporaryDirectory() as directory:
                rate, ms = _round(f"sqlite:///{Path(directory) / 'bench.db'}", args)
        else:
            url = run_env.reset_database(admin_url, DATABASE)
            try:
                rate, ms = _round(url, args)
            finally:
                run_env.drop_database(admin_url, DATABASE)
        rates.append(rate)
        cpu.append(ms)
        print(f"round {n + 1}: {rate:.0f} matches/s, {ms:.2f} CPU ms a match", flush=True)
    report = {"backend": args.backend, "jobs": args.jobs, "matches": args.matches, "rounds": args.rounds,
              "matches_per_s": round(statistics.median(rates), 1),
              "cpu_ms_per_match": round(statistics.median(cpu), 3)}  # fmt: skip
    print(json.dumps(report))


if __name__ == "__main__":
    main()
