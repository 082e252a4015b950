"""The benchmark: fairmatch's matching, a job's whole life and the soak, each beside
references measured in the same run.

    python -m bench.run [--quick] [--only lhcb,diracx,lifecycle,soak,ledger] [--seconds 20]
                        [--workers 2] [--max-jobs N] [--soak-seconds 1200] [--write-docs]

Results (results.json, summary.md, the services' logs) go to a new directory under
$FAIRMATCH_BENCH_RESULTS, else under the system's temporary directory; the summary is
printed too, and with --write-docs it replaces the figures of docs/explanation/performance.md.
A section that fails is reported and the next one runs. Progress lines go to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
import traceback
from datetime import UTC, datetime
from pathlib import Path

from bench import env, ledger
from bench.sections import ASKED_FOR, SECTIONS, Bench, Plan, ratio

DOCS_PAGE = env.REPO / "docs" / "explanation" / "performance.md"
BEGIN, END = "<!-- bench:figures:begin -->", "<!-- bench:figures:end -->"
DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
MAX_JOBS = 10_000_000
DEFAULT_SECTIONS = [s for s in SECTIONS if s not in ASKED_FOR]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes and 3 s runs: a few minutes")
    parser.add_argument("--only", default=",".join(DEFAULT_SECTIONS),
                        help=f"sections among {','.join(SECTIONS)} (default {','.join(DEFAULT_SECTIONS)})")  # fmt: skip
    parser.add_argument("--seconds", type=int, help="each measured run (default 20, quick 3)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes of each service (default 2)")
    parser.add_argument("--max-jobs", type=int, default=MAX_JOBS, help="caps every section's waiting jobs")
    parser.add_argument("--soak-seconds", type=int, help="the soak's length (default 1200, quick 120)")
    parser.add_argument("--max-pilots", type=int, help="caps every run's pilots and SQL clients (a small server)")
    parser.add_argument("--pg-url", default=os.environ.get("FAIRMATCH_BENCH_PG_URL", DEFAULT_PG_URL),
                        help="a PostgreSQL superuser URL; the benchmark creates its database beside it")  # fmt: skip
    parser.add_argument("--database", default="fairmatch_bench", help="the database it creates and drops")
    parser.add_argument("--autovacuum", choices=("turn-on", "leave"), default="turn-on",
                        help="on a server that has autovacuum off: turn it on for the run (ALTER SYSTEM,"
                             " put back at the end; the default) or leave it and say so")  # fmt: skip
    parser.add_argument("--write-docs", action="store_true",
                        help=f"write the summary into {DOCS_PAGE.name} (when every section succeeded)")  # fmt: skip
    args = parser.parse_args(argv)
    args.sections = [s for s in SECTIONS if s in args.only.split(",")]
    if not args.sections or set(args.only.split(",")) - set(SECTIONS):
        parser.error(f"--only takes sections among {','.join(SECTIONS)}; got {args.only!r}")
    return args


def results_dir() -> Path:
    base = Path(os.environ.get("FAIRMATCH_BENCH_RESULTS") or Path(tempfile.gettempdir()) / "fairmatch-bench")
    path = base / datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path.mkdir(parents=True)
    return path


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    plan = Plan.build(args.quick, args.seconds, args.workers, args.max_jobs, args.soak_seconds, args.max_pilots)
    out_dir = results_dir()
    # the options that shape the figures (no URL, which may hold a password)
    shown = {"--only": args.only if args.sections != DEFAULT_SECTIONS else None, "--seconds": args.seconds,
             "--workers": args.workers if args.workers != 2 else None, "--soak-seconds": args.soak_seconds,
             "--max-jobs": args.max_jobs if args.max_jobs != MAX_JOBS else None}  # fmt: skip
    argv_text = " ".join(["--quick"] * args.quick + [f"{k} {shlex.quote(str(v))}" for k, v in shown.items() if v])
    results: dict = {"started_at": datetime.now(UTC).isoformat(timespec="seconds"), "command": argv_text,
                     "machine": env.machine(args.pg_url), "plan": plan.__dict__, "sections": {}, "errors": {}}  # fmt: skip
    bench = Bench(plan, args.pg_url, args.database, out_dir)
    bench.log(f"results in {out_dir}")
    with env.autovacuum(args.pg_url, args.autovacuum == "turn-on", bench.log) as autovacuum:
        results["autovacuum"] = autovacuum
        try:
            for name in args.sections:
                bench.log(f"== {name} (load average {os.getloadavg()[0]:.2f})")
                try:
                    results["sections"][name] = SECTIONS[name](bench)
                except Exception as exc:  # one section's failure is reported, the others still run
                    results["errors"][name] = {
                        "error": f"{type(exc).__name__}: {exc}",
                        "traceback": traceback.format_exc(),
                    }
                    bench.log(f"{name} failed: {type(exc).__name__}: {str(exc)[:500]}")
                bench.stop()
        finally:
            bench.stop()
            try:
                env.drop_database(args.pg_url, args.database)
            except Exception as exc:  # the results are written all the same
                bench.log(f"the database {args.database} is left behind: {exc}")
    (out_dir / "results.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    summary = markdown(results)
    (out_dir / "summary.md").write_text(summary + "\n")
    print(summary)
    if args.write_docs and results["errors"]:
        bench.log(f"{DOCS_PAGE.name} left as it was: a section failed")
    elif args.write_docs:
        write_docs(summary)
        bench.log(f"figures written to {DOCS_PAGE.relative_to(env.REPO)}")
    return 1 if results["errors"] else 0


def write_docs(summary: str, page: Path = DOCS_PAGE) -> None:
    """Replace what lies between the page's two markers with `summary`."""
    text = page.read_text()
    if BEGIN not in text or END not in text:
        raise ValueError(f"{page} lacks the markers {BEGIN} and {END}")
    head, rest = text.split(BEGIN, 1)
    page.write_text(f"{head}{BEGIN}\n{summary}\n{END}{rest.split(END, 1)[1]}")


# --- the summary


def _n(value: float | None, digits: int = 0) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def _cpu(run: dict, unit: str) -> str:
    ms = run.get(f"cpu_ms_per_{unit}") or {}
    return " / ".join(_n(ms.get(k), 2) for k in ("service", "postgres", "generator"))


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return [
        f"| {' | '.join(header)} |",
        f"|{'|'.join('---' for _ in header)}|",
        *(f"| {' | '.join(r)} |" for r in rows),
    ]


def _matching(fairmatch: dict, lean: dict, extra: list[list[str]] = ()) -> list[str]:
    """fairmatch and the lean service per pilot count: matches/s, the ratio to the lean service."""
    rows = []
    for name, runs in (("fairmatch", fairmatch), ("lean claim service", lean)):
        for count, run in runs.items():
            rate = run["matches_per_s"]
            rows.append([name, str(count), _n(rate), _n(ratio(rate, lean.get(count, {}).get("matches_per_s")), 2),
                         _n(run["requests"]["match"]["p50_ms"], 1), _n(run["requests"]["match"]["p99_ms"], 1),
                         _cpu(run, "match"), str(run["error_count"])])  # fmt: skip
    return _table(["service", "pilots", "matches/s", "÷ lean", "p50 ms", "p99 ms",
                   "CPU ms/match: service / PostgreSQL / pilots", "errors"], rows + list(extra))  # fmt: skip


def _runs(sections: dict) -> list[tuple[str, dict]]:
    """(label, runs per pilot count) of every service measured with the load generator."""
    found = [(f"{name} {service}", sections[name][service]) for name in ("lhcb", "lifecycle") if name in sections
             for service in ("fairmatch", "lean")]  # fmt: skip
    found += [(f"diracx {size} {service}", s[service]) for size, s in sections.get("diracx", {}).get("sizes", {}).items()
              for service in ("fairmatch", "lean")]  # fmt: skip
    return found + ([("soak", {sections["soak"]["pilots"]: sections["soak"]["run"]})] if "soak" in sections else [])


def markdown(results: dict) -> str:
    m, plan, sections = results["machine"], results["plan"], results["sections"]
    av = results.get("autovacuum", {})
    autovacuum = ("on (turned on for the run)" if av.get("turned_on")
                  else "on" if av.get("server_setting") == "on" else "**off**: sites run it, so these figures flatter")  # fmt: skip
    lines = [
        f"Run {results['started_at']} (`python -m bench.run {results['command']}`), fairmatch {m['fairmatch']}"
        f" at {m['commit']}, {plan['workers']} workers per service; {m['cores']} cores ({m['cpu']}), load average"
        f" {m['load_average_at_start']} at the start; PostgreSQL {m['postgresql']} on the same machine,"
        f" autovacuum {autovacuum}. Services, PostgreSQL and pilots share the cores: compare the ratios to the"
        f" references of the same run; the absolute figures move with the machine and what else runs on it.",
    ]
    if "lhcb" in sections:
        s = sections["lhcb"]
        lean = s["lean"]
        extra = [[name, str(c), _n(r[key]), _n(ratio(r[key], lean.get(c, {}).get("matches_per_s")), 2), "—",
                  _n(r["p99_ms"], 1), "—", "—"]
                 for name, runs, key in (("bare PostgreSQL claim", s["bare_claim"], "claims_per_s"),
                                         ("DIRAC's matching SQL", s["dirac_sql"], "matches_per_s"))
                 for c, r in runs.items()]  # fmt: skip
        w = s["workload"]
        lines += ["", f"### Matching, LHCb ({w['task_queues']:,} task queues, {w['jobs']:,} waiting jobs)", "",
                  *_matching(s["fairmatch"], lean, extra)]  # fmt: skip
    for size, s in sections.get("diracx", {}).get("sizes", {}).items():
        w = s["workload"]
        lines += ["", f"### Matching, DiracX's shape ({w['task_queues']:,} task queues, {int(size):,} waiting jobs)",
                  "", *_matching(s["fairmatch"], s["lean"]), "",
                  f"Priorities of {w['task_queues']:,} task queues recomputed in {s['recompute_s']} s."]  # fmt: skip
    if "lifecycle" in sections:
        s = sections["lifecycle"]
        rows = []
        for name, runs in (("fairmatch", s["fairmatch"]), ("lean claim service", s["lean"])):
            for count, run in runs.items():
                req = run["requests"]
                rows.append([name, str(count), _n(run["jobs_per_s"]),
                             _n(ratio(run["jobs_per_s"], s["lean"].get(count, {}).get("jobs_per_s")), 2),
                             *(_n(req[k]["p99_ms"], 1) for k in ("match", "running", "done")),
                             _cpu(run, "job"), str(run["error_count"])])  # fmt: skip
        lines += ["", f"### A job's whole life (match, Running, Done; {s['workload']['jobs']:,} waiting)", "",
                  *_table(["service", "pilots", "jobs/s", "÷ lean", "p99 match ms", "p99 Running ms", "p99 Done ms",
                           "CPU ms/job: service / PostgreSQL / pilots", "errors"], rows)]  # fmt: skip
    if "ledger" in sections:
        lines += ["", *ledger.markdown(sections["ledger"])]
    if "soak" in sections:
        s = sections["soak"]
        run, db = s["run"], s["database_mb"]
        verdict = {True: "holds", False: "**fails**", None: "not measured"}
        lines += [
            "", f"### The soak ({s['seconds']} s, {s['pilots']} pilots, finished jobs kept {s['retention_s']} s)", "",
            *_table(["", "figure"], [
                ["jobs/s (each matched, Running, Done)", _n(run["jobs_per_s"])],
                ["jobs submitted meanwhile", f"{s['submitted']:,}"],
                ["database size, first → last sample", f"{_n(db['first'], 1)} → {_n(db['last'], 1)} MB"],
                ["last quarter ÷ quarter before (±10 %)", f"{_n(s['size_ratio'], 2)}: {verdict[s['size_holds']]}"],
                ["purges, errors", f"{s['purges']}, {len(s['purge_errors'])}"],
                ["p99 /match while purging ÷ outside (≤ 1.5)",
                 f"{_n(s['p99_ratio'], 2)} ({_n(s['match_during_purges']['p99_ms'], 1)} ÷"
                 f" {_n(s['match_outside_purges']['p99_ms'], 1)} ms): {verdict[s['p99_holds']]}"],
                ["autovacuum runs (jobs, tq_jobs, job_events)",
                 ", ".join(str(s["autovacuum_runs"].get(t, 0)) for t in ("jobs", "tq_jobs", "job_events"))],
                ["errors", str(run["error_count"] + len(s["failures"]))],
            ]),
        ]  # fmt: skip
    costly = [f"{name} at {count} pilots" for name, runs in _runs(sections) for count, run in runs.items()
              if (run.get("cpu_ms_per_match") or run.get("cpu_ms_per_job") or {}).get("generator", 0)
              > (run.get("cpu_ms_per_match") or run.get("cpu_ms_per_job") or {}).get("service", 0)]  # fmt: skip
    if costly:
        lines += ["", f"**The pilots cost more CPU than the service** ({', '.join(costly)}): those figures are bounded"
                      " by the load generator."]  # fmt: skip
    for name, error in results["errors"].items():
        lines += ["", f"**{name} failed**: `{error['error'].strip().splitlines()[0][:300]}`"]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
