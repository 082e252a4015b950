"""The in-memory selection alone: eligibility, finalists and the lottery, per pilot.

It reads the loaded database into a catalog exactly as a service process
does (`Keeper.refresh`), then times `eligible` + `choose` + `choose_level`
for every pilot description of the run, round-robin, with no database in
the loop: the part of a match whose cost could grow with the number of task
queues.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import statistics
import time
from pathlib import Path

from fairmatch.db.engine import create_engine
from fairmatch.matching.choice import choose, choose_level
from fairmatch.matching.eligibility import analysis, conditions, eligible
from fairmatch.matching.resource import ResourceDescription
from fairmatch.matching.settings import MatchingSettings
from fairmatch.services.process import Process
from fairmatch.settings import Settings


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


async def _time(url: str, resources: list[dict], rounds: int) -> dict:
    settings = Settings(database_url=url)
    engine = create_engine(url)
    keeper = Process(engine, matching=settings.matching).keeper
    try:
        async with engine.connect() as conn:
            started = time.perf_counter()
            await keeper.refresh(conn)
            load_ms = (time.perf_counter() - started) * 1000
    finally:
        await engine.dispose()
    catalog = keeper.catalog
    queries = [ResourceDescription.model_validate(r).to_query(MatchingSettings()) for r in resources]
    rng = random.Random(1)
    timings, analysis_timings, chosen = [], [], 0
    for _ in range(rounds):
        for query in queries:
            started = time.perf_counter()
            entry = choose(catalog, eligible(catalog, query), settings.effective_matching, rng)
            if entry is not None:
                choose_level(entry, settings.effective_matching, rng)
                chosen += 1
            timings.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            analysis(catalog, query)  # what the dry run adds: why each queue is in or out
            analysis_timings.append((time.perf_counter() - started) * 1000)
    per_condition = _condition_costs(catalog, queries, rounds)
    return {
        "task_queues": len(catalog),
        "live_task_queues": catalog.live.bit_count(),
        "pilots": len(queries),
        "selections": len(timings),
        "with_a_queue": chosen / len(timings),
        "catalog_load_ms": round(load_ms, 1),
        "median_ms": round(statistics.median(timings), 4),
        "p90_ms": round(_percentile(timings, 90), 4),
        "p99_ms": round(_percentile(timings, 99), 4),
        "analysis_median_ms": round(statistics.median(analysis_timings), 4),
        "analysis_p99_ms": round(_percentile(analysis_timings, 99), 4),
        "condition_median_us": per_condition,
    }


def _condition_costs(catalog, queries: list, rounds: int) -> dict[str, float]:
    """What each condition adds to a selection, median µs: the conditions of a query
    timed with that one condition's input taken away, against all of them (a condition
    that cannot be taken away, the CPU time's, is not listed)."""
    without = {
        "ram": lambda q: dataclasses.replace(q, max_ram_mb=None),
        "tags": lambda q: dataclasses.replace(q, tags=None, required_tags=frozenset()),
        "platform": lambda q: dataclasses.replace(q, values={**q.values, "platforms": None}),
        "site": lambda q: dataclasses.replace(q, values={**q.values, "sites": None}),
    }
    cost: dict[str, list[float]] = {name: [] for name in without}
    for _ in range(rounds):
        for query in queries:
            for name, take_away in without.items():
                lighter = take_away(query)
                started = time.perf_counter()
                conditions(catalog, query)
                whole = time.perf_counter() - started
                started = time.perf_counter()
                conditions(catalog, lighter)
                cost[name].append((whole - (time.perf_counter() - started)) * 1e6)
    return {name: round(statistics.median(values), 2) for name, values in cost.items()}


def selection_timing(url: str, resources_file: Path, rounds: int = 3) -> dict:
    resources = [json.loads(line) for line in resources_file.read_text().splitlines() if line.strip()]
    return asyncio.run(_time(url, resources, rounds))
