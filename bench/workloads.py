"""Benchmark workloads: generate them, load them into PostgreSQL, draw pilots.

    python -m bench.workloads load --workload lhcb --scale 1 --url postgresql://postgres@127.0.0.1:5432/DB
    python -m bench.workloads load --workload diracx --jobs 1000000 --url ...
    python -m bench.workloads top-up --workload lhcb --total 2500000 --url ...
    python -m bench.workloads pilots --workload lhcb -n 1000 --out pilots.jsonl
    python -m bench.workloads load --workload lhcb --user-priorities 1:60,2:25,3:15 --url ...

The database must exist and be migrated (`fairmatch db upgrade`); nothing
but rows is created. top-up needs the same workload options as the load.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench.workload_diracx import diracx
from bench.workload_lhcb import lhcb
from bench.workload_load import load, top_up
from bench.workload_model import USER_PRIORITY_MIX, Workload, parse_mix
from bench.workload_pilots import catalog_of, eligible_count, eligible_fraction, pilots

__all__ = [
    "Workload",
    "catalog_of",
    "diracx",
    "eligible_count",
    "eligible_fraction",
    "lhcb",
    "load",
    "pilots",
    "top_up",
]
DEFAULT_MIX = ",".join(f"{p}:{share * 100:g}" for p, share in USER_PRIORITY_MIX)


def _workload(args: argparse.Namespace) -> Workload:
    if args.workload == "lhcb":
        return lhcb(args.scale, args.seed, user_priorities=args.user_priorities)
    return diracx(args.jobs, args.seed, user_priorities=args.user_priorities)


def _mix(text: str):
    try:
        return parse_mix(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.workloads", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("load", "top-up", "pilots"):
        command = commands.add_parser(name)
        command.add_argument("--workload", choices=("lhcb", "diracx"), default="lhcb")
        command.add_argument("--scale", type=float, default=1.0, help="lhcb: jobs per TQ times this")
        command.add_argument("--jobs", type=int, default=1_000_000, help="diracx: jobs in all")
        command.add_argument("--seed", type=int, default=0)
        command.add_argument("--user-priorities", type=_mix, default=USER_PRIORITY_MIX, metavar="P:SHARE,...",
                             help=f"each TQ's jobs over user priorities (default {DEFAULT_MIX})")  # fmt: skip
        if name == "pilots":
            command.add_argument("-n", type=int, default=1000)
            command.add_argument("--pilot-seed", type=int, default=0)
            command.add_argument("--out", type=Path, help="JSON lines file (default: stdout)")
        else:
            command.add_argument("--url", required=True, help="postgresql://user@host:port/database")
        if name == "top-up":
            command.add_argument("--total", type=int, required=True, help="waiting jobs wanted in all")
    args = parser.parse_args(argv)
    workload = _workload(args)
    if args.command == "pilots":
        resources = pilots(workload, args.n, args.pilot_seed)
        lines = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in resources)
        if args.out:
            args.out.write_text(lines)
        else:
            sys.stdout.write(lines)
        print(f"{len(resources)} pilots, {eligible_fraction(workload, resources):.1%} with an eligible TQ",
              file=sys.stderr)  # fmt: skip
        return
    log = lambda line: print(line, file=sys.stderr)  # noqa: E731
    report = (
        load(args.url, workload, progress=log)
        if args.command == "load"
        else top_up(args.url, workload, args.total, progress=log)
    )
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
