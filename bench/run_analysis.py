"""What the dry run's analysis costs beside the selection, at DiracX scale, without a database.

    python -m bench.run_analysis [--jobs 1000000] [--pilots 500] [--rounds 3]

The DiracX target's 10,000 task queues as a service process holds them; per
drawn pilot, the selection (/match's choice of queue and level) and the
analysis (per condition, how many queues it rejects) are timed apart.
`make bench --only diracx` reports the same pair on a loaded database.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

from bench.workload_diracx import diracx
from bench.workload_pilots import catalog_of, pilots
from fairmatch.matching.choice import choose, choose_level
from fairmatch.matching.eligibility import analysis, eligible
from fairmatch.matching.resource import ResourceDescription
from fairmatch.matching.settings import Lottery, MatchingSettings


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def measure(jobs: int, n_pilots: int, rounds: int) -> dict:
    workload = diracx(jobs)
    catalog = catalog_of(workload)
    options = MatchingSettings(lottery=Lottery.exact)
    queries = [ResourceDescription.model_validate(r).to_query(options) for r in pilots(workload, n_pilots)]
    rng = random.Random(1)
    selection, explained = [], []
    for _ in range(rounds):
        for query in queries:
            started = time.perf_counter()
            entry = choose(catalog, eligible(catalog, query), options, rng)
            if entry is not None:
                choose_level(entry, options, rng)
            selection.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            analysis(catalog, query)
            explained.append((time.perf_counter() - started) * 1000)
    return {
        "task_queues": len(catalog), "pilots": len(queries), "draws": len(selection),
        "selection_median_ms": round(statistics.median(selection), 4),
        "selection_p99_ms": round(_percentile(selection, 99), 4),
        "analysis_median_ms": round(statistics.median(explained), 4),
        "analysis_p99_ms": round(_percentile(explained, 99), 4),
        "analysis_to_selection": round(statistics.median(explained) / statistics.median(selection), 2),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--pilots", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(measure(args.jobs, args.pilots, args.rounds), indent=2))


if __name__ == "__main__":
    main()
