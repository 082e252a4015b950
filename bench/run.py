"""The whole benchmark: workloads, pilots over real HTTP, references, figures.

    python -m bench.run [--quick] [--workers 2] [--seconds 20]
                        [--only lhcb,diracx,scaling,submit,recompute,soak,lifecycle]
                        [--max-jobs 10000000] [--soak-seconds 1200] [--keep-db] [--profile]

Each section recreates the database `fairmatch_bench` and loads what it
needs, so sections are independent; one that fails is reported and the next
one runs. Autovacuum runs throughout, as on a site: a server that has it off
gets it on for the run and its own setting back however the run ends. Results: bench/results/<UTC timestamp>.json, the figures and
server logs (and with --profile the flame graphs) in bench/results/<timestamp>/,
and Markdown tables on stdout. Progress lines go to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import traceback
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from bench import run_env
from bench.run_admin import recompute_section, submit_section
from bench.run_lifecycle import lifecycle_section
from bench.run_match import diracx_section, lhcb_section, scaling_section
from bench.run_plan import DATABASE, Bench, Plan
from bench.run_profile import py_spy
from bench.run_report import markdown
from bench.run_soak import soak_section

RESULTS = Path(__file__).resolve().parent / "results"
SECTIONS = {
    "lhcb": lhcb_section,
    "diracx": diracx_section,
    "scaling": scaling_section,
    "submit": submit_section,
    "recompute": recompute_section,
    "soak": soak_section,
    "lifecycle": lifecycle_section,
}
DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


def _sections(value: str) -> list[str]:
    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in SECTIONS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"sections are {', '.join(SECTIONS)}; got {value!r}")
    return [n for n in SECTIONS if n in names]  # always in the documented order


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes and short runs: a 2-3 minute smoke test")
    parser.add_argument("--workers", type=int, default=2, help="fairmatch serve --workers (default 2)")
    parser.add_argument("--seconds", type=int, help="each wrk, pgbench and lifecycle run (default 20, quick 3)")
    parser.add_argument("--only", type=_sections, default=list(SECTIONS),
                        help=f"comma-separated sections among {','.join(SECTIONS)}")  # fmt: skip
    parser.add_argument("--max-jobs", type=int, default=10_000_000,
                        help="largest queue (diracx, scaling, recompute; caps lifecycle's backlog)")  # fmt: skip
    parser.add_argument("--soak-seconds", type=int, help="soak duration (default 1200, quick 120)")
    parser.add_argument("--keep-db", action="store_true", help=f"leave the database {DATABASE} behind")
    parser.add_argument("--profile", action="store_true",
                        help="flame graphs (py-spy) of the server during the 64-connection and 64-pilot runs")  # fmt: skip
    parser.add_argument("--without-pilots", action="store_true",
                        help="pilots send no PilotReference nor PilotBenchmark: /match records no pilot")  # fmt: skip
    parser.add_argument("--pg-url", default=os.environ.get("FAIRMATCH_BENCH_PG_URL", DEFAULT_PG_URL),
                        help="a PostgreSQL superuser URL; the benchmark creates its database beside it")  # fmt: skip
    return parser.parse_args(argv)


def _environment() -> dict:
    """FAIRMATCH_* variables the server inherits (secrets left out)."""
    hidden = ("SECRET", "TOKEN", "PASSWORD", "KEY")
    return {k: v for k, v in os.environ.items() if k.startswith("FAIRMATCH_") and not any(h in k for h in hidden)}


def _store(results: dict, name: str, section: dict) -> None:
    # the scaling runs are a list in the plot's contract; the rest goes beside it
    if name == "scaling":
        results["scaling"] = section.pop("runs")
        results["scaling_extra"] = section
    else:
        results[name] = section


def _server_logs(out_dir: Path) -> dict:
    """Warnings and errors the servers logged, per log file: fairmatch's JSON
    lines (server-*.log) by level, the lean service's uvicorn lines (lean-*.log)
    by their `WARNING:`/`ERROR:` prefix."""
    counts = {}
    for log in sorted([*out_dir.glob("server-*.log"), *out_dir.glob("lean-*.log")]):
        levels = Counter()
        for line in log.read_text(errors="replace").splitlines():
            try:
                levels[json.loads(line).get("level", "?")] += 1
            except (ValueError, AttributeError):
                prefix = line.split(":", 1)[0].strip().lower()
                if prefix in ("warning", "error", "critical"):
                    levels[prefix] += 1
        found = {level: levels[level] for level in ("warning", "error", "critical") if levels[level]}
        if found:
            counts[log.name] = found
    return counts


def _save(results: dict, path: Path) -> None:
    path.write_text(json.dumps(results, indent=1, default=str) + "\n")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.profile:
        py_spy()  # missing: say so now, not after the loads
    plan = Plan.build(args.quick, args.workers, args.seconds, args.max_jobs, args.soak_seconds, args.profile,
                      record_pilots=not args.without_pilots)  # fmt: skip
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out_dir = RESULTS / stamp
    out_dir.mkdir(parents=True)
    results_file = RESULTS / f"{stamp}.json"
    results: dict = {
        "started_at": stamp,
        "machine": run_env.machine(args.pg_url),
        "settings": {
            "plan": plan.to_json(),
            "sections": args.only,
            "database": DATABASE,
            "pg_url": run_env.redacted(args.pg_url),
            "environment": _environment(),
        },
        "errors": {},
    }
    with tempfile.TemporaryDirectory(prefix="fairmatch-bench-") as work:
        bench = Bench(plan, args.pg_url, out_dir, Path(work))
        bench.log(f"results in {results_file}; sections {', '.join(args.only)}")
        # sites' servers run autovacuum: on for the whole run, the server's own setting back however it ends
        with run_env.autovacuum_on(args.pg_url, bench.log) as autovacuum:
            results["settings"]["autovacuum"] = bench.autovacuum = autovacuum
            try:
                for name in args.only:
                    bench.log(f"== {name} (load average {os.getloadavg()[0]:.2f})")
                    try:
                        section = SECTIONS[name](bench)
                        section["vacuum"] = run_env.vacuum_summary(section)
                        _store(results, name, section)
                    except Exception as exc:  # one section's failure is reported, the others still run
                        bench.stop_server()
                        results["errors"][name] = {"error": f"{type(exc).__name__}: {exc}"[:2000],
                                                   "traceback": traceback.format_exc()}  # fmt: skip
                        bench.log(f"{name} failed: {type(exc).__name__}: {str(exc)[:500]}")
                    results["profiles"] = bench.profiles
                    _save(results, results_file)
            finally:
                bench.stop_server()
                if not args.keep_db:
                    bench.drop_database()
    try:
        from bench.plot import plot

        for figure in plot(results, out_dir):
            bench.log(f"figure {figure}")
    except Exception as exc:
        results["errors"]["plot"] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        bench.log(f"plot failed: {exc}")
    results["server_logs"] = _server_logs(out_dir)
    results["finished_at"] = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    _save(results, results_file)
    report = markdown(results)
    (out_dir / "summary.md").write_text(report + "\n")
    print(report)
    return 1 if results["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
