"""What `fairmatch simulate` costs beside the matching code it drives, without a database.

    python -m bench.run_simulate [--scenario examples/simulate/week.toml] [--rounds 3]

Per round: the whole simulation of the scenario (its summary's matches and
wall time), then the reference measured in the same run: the same number of
bare selections (eligibility, the lottery over queues, the level draw) on the
catalog as the simulation left it, with nothing else around them. The ratio
is what the simulated world, the clock, the priority runs and the history
add to the matching code itself.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from fairmatch.matching.choice import choose, choose_level
from fairmatch.matching.eligibility import eligible
from fairmatch.simulation.run import Simulation
from fairmatch.simulation.scenario import load

ROOT = Path(__file__).resolve().parents[1]


def bare_selections(simulation: Simulation, n: int) -> float:
    """Seconds for n selections on the simulation's final catalog (nothing claimed)."""
    catalog, options, rng = simulation.catalog, simulation.settings.effective_matching, simulation.rng
    started = time.perf_counter()
    for _ in range(n):
        entry = choose(catalog, eligible(catalog, simulation.query), options, rng)
        if entry is not None:
            choose_level(entry, options, rng)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", type=Path, default=ROOT / "examples" / "simulate" / "week.toml")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    scenario, settings, classes = load(args.scenario)
    rounds = []
    for i in range(args.rounds):
        simulation = Simulation(scenario, settings, classes)
        result = simulation.run()
        reference = bare_selections(simulation, result.matches)
        rounds.append({"simulation_seconds": result.wall_seconds, "matches": result.matches,
                       "priority_runs": result.priority_runs, "bare_selection_seconds": reference,
                       "ratio": result.wall_seconds / reference})  # fmt: skip
        print(f"round {i + 1}: {json.dumps(rounds[-1])}", flush=True)
    print(json.dumps({
        "scenario": str(args.scenario.relative_to(ROOT) if args.scenario.is_relative_to(ROOT) else args.scenario),
        "median_simulation_seconds": statistics.median(r["simulation_seconds"] for r in rounds),
        "median_bare_selection_seconds": statistics.median(r["bare_selection_seconds"] for r in rounds),
        "median_ratio": statistics.median(r["ratio"] for r in rounds),
        "rounds": rounds,
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
