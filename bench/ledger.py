"""The cost ledger: where the service's CPU goes in one match and in one whole life.

py-spy samples the service's processes during a measured run; each sample (a stack,
outermost frame first) goes to one part by RULES and to one request kind by KINDS;
the samples of no route's handler are shared over the run's requests in proportion
to their number. py-spy counts a thread that can run, also while it waits for a core,
so each process's samples are weighed by its time on a core over its time runnable
(its threads' /proc/<pid>/task/<tid>/schedstat) and come to CPU seconds, set beside
the service's CPU measured from /proc.

    python -m bench.ledger RAW_FILE [--top 3]   # a recorded profile's parts and top stacks per part
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bench import env
from bench.workloads import Workload

if TYPE_CHECKING:
    from bench.sections import Bench

RATE = 200  # samples a second
ATTACH_S = 1.5  # py-spy's time to find the workers and start sampling
BUSY = 0.8  # below this share of its time runnable spent on a core, a service waited much for one
SERVER = "HTTP server and event loop"


@dataclass(frozen=True)
class Rule:
    part: str
    frames: tuple[str, ...]  # a frame `function (file:line)` that holds one of these matches
    outside_requests: bool = False  # matches only a stack that serves no request


# A stack serves a request when one of its frames is a request's code.
REQUEST_CODE = ("fairmatch/api/", "fastapi/", "starlette/", "app (lean_claim.py")
# The route handlers: a stack holding one counts to its kind; any other is shared.
KINDS = (
    ("status report", ("report_status (fairmatch/api/jobs.py", "report (lean_claim.py")),
    ("match", ("match (fairmatch/api/matching.py", "app (lean_claim.py")),
)
# The first rule that matches a frame of a stack names its part: the more specific parts come first.
# fmt: off
RULES = (
    Rule("metrics", ("prometheus_client/", "fairmatch/metrics")),
    Rule("logging", ("logging/", "fairmatch/logs.py")),
    Rule(SERVER, ("RequestResponseCycle.send", "RequestResponseCycle.receive")),  # the bytes in and out
    Rule("background work", ("fairmatch/services/background.py", "fairmatch/services/keeper.py"),
         outside_requests=True),
    Rule("response", ("model_dump_json", "job_of (", "Response.__init__", "answer (lean_claim.py")),
    Rule("body parsing and validation", ("request_body_to_args", "request_params_to_args", "Request.json",
                                         "Request.body")),
    # the driver's client side; a stack inside SQLAlchemy's greenlet holds it without its request
    Rule("claim or report", ("fairmatch/db/", "psycopg", "sqlalchemy/", "fairmatch/services/jobs.py")),
    Rule("selection", ("fairmatch/matching/", "fairmatch/services/matching.py")),
    Rule("response", ("dumps (json/",)),  # the lean service's own JSON; the driver's is the claim's
    Rule("body parsing and validation", ("loads (json/",)),
    Rule("framework routing and dependencies", ("starlette/", "fastapi/", "fairmatch/api/")),
)
# fmt: on
UNREAD = "stack not read (no Python frame)"
PARTS = (*dict.fromkeys(rule.part for rule in RULES if rule.part != SERVER), SERVER, UNREAD)  # SERVER: anything left


def part_of(frames: Sequence[str]) -> str:
    """The part of one sampled stack."""
    if all(frame.startswith("process ") for frame in frames):
        return UNREAD
    in_request = any(code in frame for frame in frames for code in REQUEST_CODE)
    for rule in RULES:
        if rule.outside_requests and in_request:
            continue
        if any(pattern in frame for frame in frames for pattern in rule.frames):
            return rule.part
    return SERVER


def kind_of(frames: Sequence[str]) -> str | None:
    """The request kind of one sampled stack, None when it is shared."""
    for kind, handlers in KINDS:
        if any(handler in frame for frame in frames for handler in handlers):
            return kind
    return None


FRAME = re.compile(r'process \d+:"[^"]*"|[^;]+')


def process_of(frames: Sequence[str]) -> int | None:
    """The innermost `process PID:"command"` frame's pid (py-spy's --subprocesses)."""
    return next((int(f[8:].split(":", 1)[0]) for f in reversed(frames) if f.startswith("process ")), None)


def read_raw(text: str) -> Counter[tuple[str, ...]]:
    """py-spy's raw format: `frame;frame;... count` a line, outermost first (a process's command may hold `;`)."""
    stacks: Counter[tuple[str, ...]] = Counter()
    for line in text.splitlines():
        if line.strip():
            stack, count = line.rsplit(" ", 1)
            stacks[tuple(FRAME.findall(stack))] += int(count)
    return stacks


def ledger(stacks: Counter[tuple[str, ...]], requests: Mapping[str, int], on_core: Mapping[int, float],
           rate: int = RATE) -> dict:  # fmt: skip
    """CPU s per part, and CPU ms per request of each kind (its own samples and its share of the shared ones);
    a sample of process p is 1/rate s of its time runnable, of which on_core[p] on a core."""
    own: dict[str, defaultdict[str, float]] = {kind: defaultdict(float) for kind, _ in KINDS}
    shared: defaultdict[str, float] = defaultdict(float)
    for frames, count in stacks.items():
        kind = kind_of(frames)
        (own[kind] if kind else shared)[part_of(frames)] += count * on_core.get(process_of(frames) or 0, 1.0) / rate
    every = {p: shared[p] + sum(mine[p] for mine in own.values()) for p in PARTS}
    total_requests = sum(requests.values())

    def per_request(kind: str) -> dict[str, float] | None:
        if not requests.get(kind):
            return None
        ms = {p: (own[kind][p] / requests[kind] + shared[p] / total_requests) * 1000 for p in PARTS}
        return {**ms, "total": sum(ms.values())}

    return {
        "samples": stacks.total(), "sampled_s": stacks.total() / rate, "cpu_s": sum(every.values()),
        "cpu_s_per_part": every, "shared_cpu_s": sum(shared.values()), "requests": dict(requests),
        "ms_per_request": {kind: per_request(kind) for kind, _ in KINDS},
    }  # fmt: skip


def schedule(root: int) -> dict[int, tuple[int, int]]:
    """ns on a core and ns runnable but waiting for one, of `root` and each process under it (its threads')."""
    times = {}
    for pid in env.tree_ticks(root):
        on_core = waiting = 0
        with contextlib.suppress(OSError):  # a process or thread that ended meanwhile
            for task in os.scandir(f"/proc/{pid}/task"):
                ran, waited, _ = Path(task.path, "schedstat").read_text().split()
                on_core, waiting = on_core + int(ran), waiting + int(waited)
        times[pid] = (on_core, waiting)
    return times


def py_spy() -> str:
    beside = Path(sys.executable).with_name("py-spy")
    found = str(beside) if beside.exists() else shutil.which("py-spy")
    if not found:
        raise RuntimeError("the ledger samples the services with py-spy, which is not installed: pip install py-spy"
                           " (or fairmatch's `bench` extra: pip install -e '.[bench]')")  # fmt: skip
    return found


@contextmanager
def recording(pid: int, path: Path) -> Iterator[dict[str, int]]:
    """py-spy samples process `pid` and its children into `path` until the block ends; the dict yielded
    gets py-spy's count of samples and of samples it failed to read."""
    command = [py_spy(), "record", "--pid", str(pid), "--subprocesses", "--format", "raw", "--rate", str(RATE),
               "--nonblocking", "--output", str(path)]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(ATTACH_S)
    counts: dict[str, int] = {}
    try:
        if process.poll() is None:
            yield counts
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)  # py-spy writes its file on Ctrl-C
        said, _ = process.communicate(timeout=120)
    if found := re.search(r"Samples: (\d+) Errors: (\d+)", said):
        counts.update(samples=int(found[1]), errors=int(found[2]))
    if process.returncode or not path.exists():
        raise RuntimeError(f"py-spy failed (exit {process.returncode}; it needs the right to trace the service:"
                           f" root or CAP_SYS_PTRACE):\n{said.strip()[-2000:]}")  # fmt: skip


def measured(b: Bench, service: env.Service, resources: Path, lives: bool, raw: Path) -> dict:
    """One run of the load generator sampled by py-spy: the run's figures and its ledger."""
    pid = service.process.pid
    with recording(pid, raw) as py_spy_counts:
        before = schedule(pid)
        run = b.pilots(service, resources, b.plan.ledger_pilots, b.plan.seconds, lives)
        after = schedule(pid)
    spent = {p: [now - then for now, then in zip(times, before.get(p, (0, 0)))] for p, times in after.items()}
    on_core = {p: ran / (ran + waited) for p, (ran, waited) in spent.items() if ran + waited > 0}
    requests = {"match": run["requests"]["match"]["count"],
                "status report": run["requests"]["running"]["count"] + run["requests"]["done"]["count"]}  # fmt: skip
    book = ledger(read_raw(raw.read_text()), requests, on_core)
    unit = run["jobs"] if lives else run["matches"]
    cpu = run["cpu_ms_per_job" if lives else "cpu_ms_per_match"]["service"] * unit / 1000
    runnable = sum(ran + waited for ran, waited in spent.values()) / 1e9
    book.update(measured_cpu_s=cpu, ratio=book["cpu_s"] / cpu if cpu else None, raw=raw.name, py_spy=py_spy_counts,
                on_core=on_core, on_core_s=sum(ran for ran, _ in spent.values()) / 1e9, runnable_s=runnable,
                coverage=book["sampled_s"] / runnable if runnable else None)  # fmt: skip
    if lives:  # a job's whole life: every part of the run over its jobs
        parts = {**book["cpu_s_per_part"], "total": book["cpu_s"]}
        book["ms_per_job"] = {p: s * 1000 / unit for p, s in parts.items()} if unit else None
    b.log(f"ledger of {service.name} ({'lives' if lives else 'matches'}): {book['sampled_s']:.2f} s sampled,"
          f" {runnable:.2f} s runnable, {book['on_core_s']:.2f} s on a core; {book['cpu_s']:.2f} s in the ledger,"
          f" {cpu:.2f} s measured (ratio {book['ratio'] or 0:.2f}); py-spy {py_spy_counts}")  # fmt: skip
    return {**run, "ledger": book}


def section(b: Bench, workload: Workload) -> dict:
    """fairmatch and the lean service, matches only then whole lives, each run sampled by py-spy."""
    b.fresh()
    out: dict = {"workload": workload.describe(), "pilots": b.plan.ledger_pilots, "rate": RATE,
                 "load": b.fill(workload, workload.total_jobs), "fairmatch": {}, "lean": {}}  # fmt: skip
    resources = b.resources(workload)
    for name in ("fairmatch", "lean"):
        for lives in (False, True):
            b.fill(workload, workload.total_jobs)
            service = b.fairmatch() if name == "fairmatch" else b.lean()
            raw = b.out_dir / f"ledger-{name}-{'lives' if lives else 'matches'}.txt"
            out[name]["lives" if lives else "matches"] = measured(b, service, resources, lives, raw)
    return out


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def markdown(s: dict) -> list[str]:
    """The ledger's table: parts as rows, a match and a whole life of each service as columns."""
    runs = [s[name][run] for run in ("matches", "lives") for name in ("fairmatch", "lean")]
    books = [r["ledger"] for r in runs]
    columns = [*(b["ms_per_request"]["match"] for b in books[:2]), *(b["ms_per_job"] for b in books[2:])]
    units = [*(b["requests"]["match"] for b in books[:2]), *(r["jobs"] for r in runs[2:])]
    rows = [[part, *(_ms(c and c[part]) for c in columns)] for part in PARTS]
    rows += [["**the ledger's total**", *(_ms(c and c["total"]) for c in columns)],
             ["measured service CPU (/proc)", *(_ms(b["measured_cpu_s"] * 1000 / n if n else None)
                                                for b, n in zip(books, units))],
             ["ledger ÷ measured", *(_ms(b["ratio"]) for b in books)],
             ["samples ÷ time runnable", *(_ms(b["coverage"]) for b in books)],
             ["samples py-spy failed to read ÷ samples",
              *(_ms(b["py_spy"]["errors"] / b["samples"] if b["py_spy"] and b["samples"] else None) for b in books)],
             ["time on a core ÷ time runnable", *(_ms(b["on_core_s"] / b["runnable_s"]) for b in books)]]  # fmt: skip
    header = ["ms of service CPU", "fairmatch, per match", "lean, per match", "fairmatch, whole life per job",
              "lean, whole life per job"]  # fmt: skip
    per_kind = [{kind: ms and ms["total"] for kind, ms in b["ms_per_request"].items()} for b in books[2:]]
    kinds = "; ".join(f"{name} {_ms(k['match'])} ms per match and {_ms(k['status report'])} per status report"
                      for name, k in zip(("fairmatch", "lean"), per_kind))  # fmt: skip
    return [
        f"### The cost ledger (LHCb, {s['pilots']} pilots, py-spy at {s['rate']} samples/s)", "",
        f"| {' | '.join(header)} |", f"|{'|'.join('---' for _ in header)}|", *(f"| {' | '.join(r)} |" for r in rows),
        "", "A match is one `/match` request (an empty answer too); a whole life is its run's CPU over its jobs"
        f" (in whole lives: {kinds}). The samples of no route's handler (event loop, server, background loops, the"
        " framework before and after the handler) are shared over the run's requests in proportion to their number."
        " py-spy counts a thread that can run, also while it waits for a core: each process's samples are weighed"
        " by its time on a core over its time runnable (/proc/…/schedstat)."
        + (" **Much of the time runnable was spent waiting for a core** (a busy machine): the parts take the wait"
           " to fall on them as the CPU does, which a quieter run checks best."
           if min(b["on_core_s"] / b["runnable_s"] for b in books) < BUSY else ""),
    ]  # fmt: skip


def top_stacks(stacks: Counter[tuple[str, ...]], top: int) -> Iterable[str]:
    """Each part's share of the samples and its `top` heaviest stacks (their innermost frames)."""
    total = stacks.total()
    for part in PARTS:
        mine = Counter({frames: n for frames, n in stacks.items() if part_of(frames) == part})
        yield f"{part}: {mine.total() * 100 / total:.1f} % of the samples"
        for frames, n in mine.most_common(top):
            yield f"  {n:6d} [{kind_of(frames) or 'shared'}] …;{';'.join(frames[-6:])}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ledger", description=__doc__.splitlines()[0])
    parser.add_argument("raw", type=Path, help="a py-spy profile in raw format")
    parser.add_argument("--top", type=int, default=3, help="stacks shown per part")
    args = parser.parse_args(argv)
    print("\n".join(top_stacks(read_raw(args.raw.read_text()), args.top)))


if __name__ == "__main__":
    main()
