"""Matches on the embedded SQLite default, against the bare SQLite claim.

    python -m bench.run_sqlite_claim [--task-queues 300] [--jobs 30000] [--matches 5000] [--rounds 3]

A database file gets `--jobs` waiting jobs over `--task-queues` queues (a long
tail: queue k holds about 1/k of the jobs; five groups, owners within them,
user priorities 1-5 spread inside every queue), submitted and prioritised by
the service itself. Per round, two copies of it:

- fairmatch: `--matches` matches of one pilot through the service's own match
  (catalog, eligibility, lottery, level draw, the claim), one connection, in
  process: no HTTP, which the PostgreSQL benchmark covers;
- reference, the bare claim: plain synchronous sqlite3, one BEGIN IMMEDIATE
  transaction a claim (lowest waiting id of a queue drawn at random, removed,
  marked Matched, its event written), nothing else.

Prints per-match milliseconds of both, and their ratio (median of the rounds), and
the CPU milliseconds of fairmatch's process a match (all its threads: SQLite runs in a
thread of its own), the steadier figure on a machine shared with other work.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import sqlite3
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from fairmatch.db import migrate
from fairmatch.db.engine import create_engine
from fairmatch.jobs.models import JobSpec
from fairmatch.matching.resource import ClaimingResource
from fairmatch.services import matching, priorities, submission
from fairmatch.services.process import Process
from fairmatch.settings import Settings

PILOT = {"Site": "BENCH", "CPUTime": 10**7}


def _specs(task_queues: int, jobs: int, rng: random.Random) -> list[JobSpec]:
    """A long tail of queues (one per owner and CPU bucket), user priorities 1-5 in each."""
    weights = [1 / k for k in range(1, task_queues + 1)]
    counts = [int(w * jobs / sum(weights)) for w in weights]
    for k in range(jobs - sum(counts)):  # exactly `jobs`: the rest to the head of the tail
        counts[k % task_queues] += 1
    specs = []
    for k, count in enumerate(counts):
        group = f"g{k % 5}"
        for _ in range(count):
            specs.append(JobSpec(owner=f"u{k}", owner_group=group, user_priority=rng.randint(1, 5),
                                 cpu_time=3600 * (1 + k % 3), priority_class=0))  # fmt: skip
    return specs


async def _prepare(url: str, task_queues: int, jobs: int) -> int:
    settings = Settings(database_url=url)
    engine = create_engine(url, pool_size=1)
    try:
        async with engine.connect() as conn:
            specs = _specs(task_queues, jobs, random.Random(1))
            for start in range(0, len(specs), 5000):
                await submission.submit(conn, specs[start : start + 5000], settings, by="alice")
            corrections = priorities.configured_corrections(settings.priority)
            await priorities.recompute(conn, settings, corrections, runner="bench", scheduled=False)
            return len(specs)
    finally:
        await engine.dispose()


async def _fairmatch(url: str, matches: int) -> tuple[float, float]:
    """Seconds and CPU seconds for `matches` matches through the service."""
    settings = Settings(database_url=url)
    engine = create_engine(url, pool_size=1)
    process, rng = Process(engine, matching=settings.matching), random.Random(2)
    pilot = ClaimingResource(**PILOT)
    try:
        async with engine.connect() as conn:
            started, cpu = time.perf_counter(), time.process_time()
            for _ in range(matches):
                if await matching.match(conn, pilot, settings, rng, "bench", process) is None:
                    raise SystemExit("the queues ran dry: ask for fewer --matches or more --jobs")
            return time.perf_counter() - started, time.process_time() - cpu
    finally:
        await engine.dispose()


def _bare(path: Path, matches: int) -> float:
    """Seconds for `matches` bare claims on plain sqlite3."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    queues = [row[0] for row in db.execute("SELECT id FROM task_queues")]
    rng = random.Random(3)
    started = time.perf_counter()
    for _ in range(matches):
        now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
        db.execute("BEGIN IMMEDIATE")
        row = db.execute("SELECT job_id FROM tq_jobs WHERE tq_id = ? ORDER BY job_id LIMIT 1",
                         (rng.choice(queues),)).fetchone()  # fmt: skip
        if row is not None:
            db.execute("DELETE FROM tq_jobs WHERE job_id = ?", row)
            db.execute("UPDATE jobs SET status = 'Matched', matched_at = ? WHERE id = ?", (now, row[0]))
            db.execute("INSERT INTO job_events (job_id, status, at, source) VALUES (?, 'Matched', ?, 'match')",
                       (row[0], now))  # fmt: skip
        db.execute("COMMIT")
    elapsed = time.perf_counter() - started
    db.close()
    return elapsed


def _rounds(args: argparse.Namespace) -> tuple[list[float], list[float], list[float], int]:
    """Per round, ms a match of fairmatch, its CPU ms and ms of the bare claim; and the jobs submitted."""
    with tempfile.TemporaryDirectory() as directory:
        config = Path(directory) / "empty.toml"
        config.write_text("")
        os.environ["FAIRMATCH_CONFIG"] = str(config)  # the defaults, whatever the working directory holds
        source = Path(directory) / "source.db"
        migrate.upgrade(f"sqlite:///{source}")
        submitted = asyncio.run(_prepare(f"sqlite:///{source}", args.task_queues, args.jobs))
        ours, cpu, bare = [], [], []
        for n in range(args.rounds):
            copies = [Path(directory) / f"round{n}-{kind}.db" for kind in ("fairmatch", "bare")]
            for copy in copies:
                shutil.copyfile(source, copy)
            seconds, cpu_seconds = asyncio.run(_fairmatch(f"sqlite:///{copies[0]}", args.matches))
            ours.append(seconds / args.matches * 1000)
            cpu.append(cpu_seconds / args.matches * 1000)
            bare.append(_bare(copies[1], args.matches) / args.matches * 1000)
            print(f"round {n + 1}: fairmatch {ours[-1]:.3f} ms a match ({cpu[-1]:.3f} CPU ms),"
                  f" bare claim {bare[-1]:.3f} ms", flush=True)  # fmt: skip
    return ours, cpu, bare, submitted


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task-queues", type=int, default=300)
    parser.add_argument("--jobs", type=int, default=30_000)
    parser.add_argument("--matches", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    saved = os.environ.get("FAIRMATCH_CONFIG")
    try:
        ours, cpu, bare, submitted = _rounds(args)
    finally:  # the defaults were for this run only
        if saved is None:
            os.environ.pop("FAIRMATCH_CONFIG", None)
        else:
            os.environ["FAIRMATCH_CONFIG"] = saved
    report = {
        "task_queues": args.task_queues, "jobs": submitted, "matches": args.matches, "rounds": args.rounds,
        "fairmatch_ms": round(statistics.median(ours), 3), "fairmatch_cpu_ms": round(statistics.median(cpu), 3),
        "bare_claim_ms": round(statistics.median(bare), 3),
        "ratio": round(statistics.median(ours) / statistics.median(bare), 2),
    }  # fmt: skip
    print(json.dumps(report))


if __name__ == "__main__":
    main()
