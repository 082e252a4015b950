"""What one benchmark run measures (sizes, durations) and the state shared by
its sections: the database, the server, the pilots files, progress lines."""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path

from bench import run_env
from bench.pilots import PILOT_LIFE, write_resources
from bench.run_cpu import postmaster_of
from bench.run_profile import Profile
from bench.workload_api import SITE_BATCH, api_top_up
from bench.workloads import Workload, load, pilots, top_up

DATABASE = "fairmatch_bench"
SCALING_SIZES = (1_000_000, 2_500_000, 5_000_000, 10_000_000)
DIRACX_SIZES = (1_000_000, 10_000_000)  # matching on the DiracX target; capped by --max-jobs
QUICK_SIZES = (50_000, 100_000)
LIFECYCLE_JOBS, QUICK_LIFECYCLE_JOBS = 200_000, 20_000  # waiting at the start of each lifecycle run
SOAK_JOBS = 100_000  # waiting throughout the soak, kept by its submitter
QUICK_SOAK_JOBS = 20_000


@dataclass(frozen=True)
class Plan:
    quick: bool
    workers: int
    seconds: int  # each closed-loop wrk run, each pgbench run and each lifecycle run
    lhcb_scale: float
    scaling_sizes: tuple[int, ...]
    diracx_sizes: tuple[int, ...]
    recompute_jobs: tuple[int, ...]
    recompute_repeats: int
    submit_batches: int  # per client count
    soak_seconds: int
    soak_window: int  # the size series' two windows compared at the soak's end
    soak_waiting: int  # the waiting pool the soak's submitter keeps
    soak_retention: int  # seconds a finished job (its events, its pilot) is kept
    soak_purge_interval: int  # seconds between two purges of each server process
    lifecycle_jobs: int = LIFECYCLE_JOBS  # capped by --max-jobs
    connections: tuple[int, ...] = (1, 8, 64)
    bare_clients: tuple[int, ...] = (16, 64)
    legacy_clients: tuple[int, ...] = (8, 64)
    lean_connections: tuple[int, ...] = (64, 8)  # the lean claim service, as many workers as fairmatch
    scaling_connections: tuple[int, ...] = (64, 8)  # the first is the one plotted; diracx runs these too
    submit_batch: int = 10_000  # the submit section's bulk batches
    site_batch: int = SITE_BATCH  # jobs per POST /jobs when a section loads or tops up as a site submits
    submit_clients: tuple[int, ...] = (1, 2)
    soak_pilots: int = 32  # concurrent pilots of the soak, each living whole lives
    soak_sample: int = 10  # seconds between two samples of the database's sizes
    lifecycle_pilots: tuple[int, ...] = (8, 32, 64)  # concurrent pilots of the lifecycle runs
    pilots: int = 10_000
    seed: int = 0
    profile: bool = False  # flame graphs of the service during the 64-connection and 64-pilot runs
    profiled_load: int = 64  # the connection count (lhcb, diracx) and pilot count (lifecycle) profiled
    record_pilots: bool = True  # pilots send PilotReference and PilotBenchmark, as on a site

    @classmethod
    def build(
        cls, quick: bool, workers: int, seconds: int | None, max_jobs: int, soak_seconds: int | None,
        profile: bool = False, record_pilots: bool = True,
    ) -> Plan:  # fmt: skip
        if quick:
            sizes, diracx_sizes, recompute, scale = QUICK_SIZES, QUICK_SIZES, (50_000,), 0.05
        else:
            sizes, diracx_sizes, recompute, scale = SCALING_SIZES, DIRACX_SIZES, (1_000_000, max_jobs), 1.0
        sizes = tuple(n for n in sizes if n <= max_jobs) or (max_jobs,)
        diracx_sizes = tuple(sorted({min(n, max_jobs) for n in diracx_sizes}))
        recompute = tuple(sorted({min(n, max_jobs) for n in recompute}))
        return cls(
            quick=quick,
            workers=workers,
            seconds=seconds or (3 if quick else 20),
            lhcb_scale=scale,
            scaling_sizes=sizes,
            diracx_sizes=diracx_sizes,
            recompute_jobs=recompute,
            recompute_repeats=3 if quick else 5,
            submit_batches=2 if quick else 20,
            soak_seconds=soak_seconds or (120 if quick else 1200),
            soak_window=30 if quick else 300,
            soak_waiting=min(QUICK_SOAK_JOBS if quick else SOAK_JOBS, max_jobs),
            # quick: short enough that the purges keep up within the first of its two minutes
            soak_retention=30 if quick else 120,
            soak_purge_interval=10 if quick else 25,
            lifecycle_jobs=min(QUICK_LIFECYCLE_JOBS if quick else LIFECYCLE_JOBS, max_jobs),
            profile=profile,
            record_pilots=record_pilots,
        )

    @property
    def pilot_life(self) -> int:
        """Requests (wrk) or jobs (lifecycle) per PilotReference; 0 when pilots send none."""
        return PILOT_LIFE if self.record_pilots else 0

    def to_json(self) -> dict:
        return asdict(self)


class Bench:
    """One database (recreated per section) and at most one server at a time."""

    def __init__(self, plan: Plan, admin_url: str, out_dir: Path, work_dir: Path):
        # out_dir keeps the server logs; work_dir the throw-away files
        self.plan, self.admin_url, self.out_dir, self.work_dir = plan, admin_url, out_dir, work_dir
        self.url: str | None = None
        self.server: run_env.Service | None = None  # fairmatch or the lean claim service
        self.started = time.monotonic()
        self._pilots: dict[tuple, Path] = {}
        self.profiles: list[dict] = []  # the flame graphs recorded, in order
        self.autovacuum: dict = {}  # the server's setting before the run, and whether the run turned it on
        self.rng = random.Random(f"submit:{plan.seed}")  # the order jobs are submitted in

    @cached_property
    def postmaster(self) -> int | None:
        """PostgreSQL's postmaster pid, for the CPU of its process tree."""
        return postmaster_of(self.url or self.admin_url)

    def start_profile(self, name: str, service: run_env.Service, load: int) -> Profile | None:
        """With --profile and at the profiled load, py-spy on `service` for one run,
        into <results>/<name>-<load>.svg; None otherwise."""
        if not self.plan.profile or load != self.plan.profiled_load:
            return None
        return Profile(service.process.pid, self.out_dir / f"{name}-{load}.svg", self.plan.seconds)

    def finish_profile(self, profile: Profile | None, run: str) -> dict | None:
        """Wait for the recording, note it among the profiles and return what it says."""
        if profile is None:
            return None
        recorded = {"run": run, **profile.finish()}
        self.profiles.append(recorded)
        self.log(f"flame graph {recorded['svg']}: {recorded['samples']} samples"
                 if recorded["svg"] else f"flame graph of {run} failed: {recorded['error']}")  # fmt: skip
        return recorded

    def log(self, line: str) -> None:
        print(f"[{time.monotonic() - self.started:7.1f}s] {line}", file=sys.stderr, flush=True)

    def fresh_database(self) -> str:
        self.stop_server()
        self.url = run_env.reset_database(self.admin_url, DATABASE)
        self.log(f"database {DATABASE} created and migrated")
        return self.url

    def drop_database(self) -> None:
        self.stop_server()
        run_env.drop_database(self.admin_url, DATABASE)

    def load(self, workload: Workload) -> dict:
        """The workload by COPY (analysed after: see workload_load._finish)."""
        self.log(f"loading {workload.name}: {len(workload.specs):,} TQs, {workload.total_jobs:,} jobs")
        return load(self.url, workload, progress=lambda line: self.log(f"  {line}"))

    def _wait_idle(self) -> None:
        if self.server is not None and not run_env.wait_idle(self.url, application_name=self.server.application_name):
            self.log(f"the {self.server.name} is still busy after 120 s; topping up anyway")

    def fill(self, workload: Workload, total: int) -> int:
        """Top the queue up to `total` waiting jobs by COPY; return the waiting jobs."""
        self._wait_idle()
        report = top_up(self.url, workload, total, progress=None)
        if report["jobs"]:
            self.log(f"topped up {report['jobs']:,} jobs in {report['seconds']:.1f} s")
        return run_env.waiting_jobs(self.url)

    def submit(self, workload: Workload, total: int) -> dict:
        """Top the queue up to `total` waiting jobs through the running fairmatch
        server's POST /jobs, in a site's batches (bench/workload_api.py); an empty
        database is loaded whole. Returns what was sent and how fast."""
        if not isinstance(self.server, run_env.Server):
            raise RuntimeError("submitting through the API needs a fairmatch server running")
        self._wait_idle()
        report = api_top_up(self.server.api, self.url, workload, total, self.plan.site_batch, self.rng, self.log)
        if report["jobs"]:
            self.log(f"submitted {report['jobs']:,} jobs through POST /jobs in {report['seconds']:.1f} s"
                     f" ({report['jobs_per_s']:,.0f} jobs/s, {report['retried_503']} answers 503 retried)")  # fmt: skip
        return report

    def start_server(self, settings: Mapping[str, str] = {}) -> run_env.Server:
        """A new server (the previous one stopped), its priorities computed once;
        `settings` are FAIRMATCH_* variables on top of the defaults."""
        self.stop_server()
        self.server = run_env.Server(self.url, self.plan.workers, self.out_dir, self.work_dir, settings)
        seconds, _ = self.server.recompute()
        self.log(f"fairmatch serve --workers {self.plan.workers} ready at {self.server.root}"
                 f" (first recompute {seconds:.2f} s)")  # fmt: skip
        return self.server

    def start_lean(self) -> run_env.LeanServer:
        """The lean claim service with as many workers as fairmatch (the previous server stopped)."""
        self.stop_server()
        self.server = run_env.LeanServer(self.url, self.plan.workers, self.out_dir)
        self.log(f"lean claim service, {self.plan.workers} workers, ready at {self.server.root}")
        return self.server

    def stop_server(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def pilots_file(self, workload: Workload) -> Path:
        """The workload's pilot resource descriptions, one JSON a line (made once)."""
        key = (workload.name, workload.seed, workload.total_jobs)
        if key not in self._pilots:
            path = self.work_dir / f"pilots-{len(self._pilots)}.jsonl"
            write_resources(pilots(workload, self.plan.pilots, self.plan.seed, self.plan.record_pilots), path)
            self._pilots[key] = path
        return self._pilots[key]
