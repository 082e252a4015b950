"""The benchmark's surroundings: its database, the fairmatch server under test,
and the facts about the machine that go into the results."""

from __future__ import annotations

import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path

import httpx
import psycopg
from sqlalchemy.engine import make_url

from fairmatch.db import migrate
from fairmatch.db.engine import APPLICATION_NAME

REPO = Path(__file__).resolve().parent.parent
# the lean claim service's database sessions (bench/references/lean_claim.py names them so)
LEAN_APPLICATION_NAME = "fairmatch-bench-lean"
# the tables that matching writes to: analysed after a bulk load, their autovacuum watched during runs
HOT_TABLES = ("tq_jobs", "jobs", "job_events", "task_queues")
PG_SETTINGS = ("shared_buffers", "work_mem", "effective_cache_size", "max_connections", "synchronous_commit",
               "fsync", "autovacuum", "jit")  # fmt: skip


def database_url(admin_url: str, name: str) -> str:
    """The admin URL pointed at database `name`, in libpq form."""
    url = make_url(admin_url).set(drivername="postgresql", database=name)
    return url.render_as_string(hide_password=False)


def redacted(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)


def reset_database(admin_url: str, name: str) -> str:
    """Drop `name`, create it empty and migrate it to head; return its URL."""
    drop_database(admin_url, name)
    with psycopg.connect(database_url(admin_url, _admin_db(admin_url)), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = database_url(admin_url, name)
    migrate.upgrade(url)
    return url


def drop_database(admin_url: str, name: str) -> None:
    with psycopg.connect(database_url(admin_url, _admin_db(admin_url)), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _admin_db(admin_url: str) -> str:
    return make_url(admin_url).database or "postgres"


def query(url: str, statement: str, params: tuple = ()) -> list[tuple]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(statement, params).fetchall()


def waiting_jobs(url: str) -> int:
    return query(url, "SELECT count(*) FROM tq_jobs")[0][0]


def analyze(url: str) -> None:
    """ANALYZE the hot tables, once, right after a bulk load: a site's
    autoanalyze would do it within a minute of such a load (autovacuum_naptime),
    and the runs would otherwise start on the planner's guesses for empty
    tables. Nothing is vacuumed by hand: autovacuum runs, as on a site."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"ANALYZE {', '.join(HOT_TABLES)}")


def setting(url: str, name: str) -> str:
    return query(url, "SELECT current_setting(%s)", (name,))[0][0]


@contextmanager
def autovacuum_on(admin_url: str, log: Callable[[str], object] = print) -> Iterator[dict]:
    """autovacuum on for the whole cluster while the benchmark runs, as sites'
    servers run it: when the server has it off, `ALTER SYSTEM SET autovacuum =
    on` and a reload, undone however the run ends (an exception, Ctrl-C, or
    SIGTERM, which is turned into SystemExit meanwhile). Undone means RESET,
    or the value ALTER SYSTEM had set before, if it had. Yields what was
    seen and done, for the results."""
    url = database_url(admin_url, _admin_db(admin_url))
    autovacuum = "SELECT setting, COALESCE(sourcefile, '') FROM pg_settings WHERE name = 'autovacuum'"
    before, source = query(url, autovacuum)[0]
    state = {"before": before, "turned_on": before != "on"}
    if not state["turned_on"]:
        yield state
        return
    # a value ALTER SYSTEM wrote earlier is put back, not reset to the file's
    restore = f"ALTER SYSTEM SET autovacuum = {before}" if source.endswith("postgresql.auto.conf") else None
    previous_term = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        _alter_autovacuum(url, "ALTER SYSTEM SET autovacuum = on")
        log("autovacuum turned on for the run (ALTER SYSTEM); it is reset at the end")
        deadline = time.monotonic() + 10  # the reload reaches new sessions within moments
        while setting(url, "autovacuum") != "on" and time.monotonic() < deadline:
            time.sleep(0.1)
        yield state
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the restore short
        _alter_autovacuum(url, restore or "ALTER SYSTEM RESET autovacuum")
        signal.signal(signal.SIGTERM, previous_term)
        state["after"] = setting(url, "autovacuum")
        log(f"autovacuum restored: {state['after']}")


def _exit_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)


def _alter_autovacuum(url: str, statement: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(statement)
        conn.execute("SELECT pg_reload_conf()")


def table_activity(url: str, tables: Sequence[str] = HOT_TABLES) -> dict[str, dict[str, int]]:
    """Autovacuum and autoanalyze runs so far, and live and dead tuples, per table."""
    rows = query(
        url,
        "SELECT relname, autovacuum_count, autoanalyze_count, n_live_tup, n_dead_tup FROM pg_stat_user_tables"
        " WHERE relname = ANY(%s)",
        (list(tables),),
    )
    return {name: {"autovacuum": v, "autoanalyze": a, "live": live, "dead": dead} for name, v, a, live, dead in rows}


@contextmanager
def watched_tables(url: str, tables: Sequence[str] = HOT_TABLES) -> Iterator[dict]:
    """What autovacuum did during a measured run: yields a dict that holds, once
    the block ends, the autovacuum setting at its start and end and per table
    the dead tuples at the start and end and the autovacuum and autoanalyze
    runs in between."""
    record: dict = {"setting": setting(url, "autovacuum")}
    before = table_activity(url, tables)
    yield record
    after = table_activity(url, tables)
    record["setting_at_end"] = setting(url, "autovacuum")
    empty = {"autovacuum": 0, "autoanalyze": 0, "dead": 0}
    record["tables"] = {
        t: {"dead_at_start": before.get(t, empty)["dead"], "dead_at_end": a["dead"],
            "autovacuum_runs": a["autovacuum"] - before.get(t, empty)["autovacuum"],
            "autoanalyze_runs": a["autoanalyze"] - before.get(t, empty)["autoanalyze"]}
        for t, a in sorted(after.items())
    }  # fmt: skip


def wait_idle(url: str, seconds: float = 120, application_name: str = APPLICATION_NAME) -> bool:
    """Wait until no session of the service under test (`application_name`)
    on this database is busy. A wrk run ends with requests still in flight,
    which the server finishes after wrk has gone: a top-up must not meet them
    (its table locks would deadlock with their claims). True when idle, False
    when the time ran out."""
    deadline = time.monotonic() + seconds
    quiet = 0
    while time.monotonic() < deadline:
        busy = query(
            url,
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = %s AND state <> 'idle'",
            (application_name,),
        )[0][0]
        # idle twice in a row: a request may sit between two transactions
        quiet = quiet + 1 if busy == 0 else 0
        if quiet >= 2:
            return True
        time.sleep(0.2)
    return False


def vacuum_summary(section: object) -> dict:
    """A section's measured runs as watched_tables recorded them, summed: the
    autovacuum settings seen, the runs, per table the autovacuum and
    autoanalyze runs during them and the most dead tuples any run started with."""
    # a run quoted twice (the best of a reference's runs beside them) counts once
    records = list({id(r): r for r in _vacuum_records(section)}.values())
    tables = sorted({t for r in records for t in r["tables"]})

    def per_table(key: str, combine: Callable) -> dict[str, int]:
        return {t: combine((r["tables"].get(t, {}).get(key, 0) for r in records), default=0) for t in tables}

    return {
        "settings": sorted({r[k] for r in records for k in ("setting", "setting_at_end")}),
        "runs": len(records),
        "autovacuum_runs": per_table("autovacuum_runs", lambda v, default: sum(v, default)),
        "autoanalyze_runs": per_table("autoanalyze_runs", lambda v, default: sum(v, default)),
        "dead_at_start_max": per_table("dead_at_start", max),
    }


def _vacuum_records(value: object) -> Iterator[dict]:
    if isinstance(value, dict):
        if "setting_at_end" in value and "tables" in value:
            yield value
            return
        for v in value.values():
            yield from _vacuum_records(v)
    elif isinstance(value, list):
        for v in value:
            yield from _vacuum_records(v)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_ready(root: str, process, seconds: float = 15) -> bool:
    """Poll GET {root}/readyz until it answers 200; False if `process` exits or time runs out."""
    deadline = time.monotonic() + seconds
    # one client, no TLS context (plain http on loopback): making one per poll cost ~30 ms of CPU
    with httpx.Client(timeout=1, verify=False) as client:
        while time.monotonic() < deadline and process.poll() is None:
            try:
                if client.get(f"{root}/readyz").status_code == 200:
                    return True
            except httpx.TransportError:
                pass
            time.sleep(0.1)
    return False


class Service:
    """An HTTP service under test: a subprocess on a free loopback port, ready
    once GET /readyz answers 200, stopped with SIGTERM. `application_name` names
    its database sessions (see wait_idle)."""

    application_name = APPLICATION_NAME
    name = "service"
    exposes_metrics = False  # GET /metrics in Prometheus' text format

    def __init__(self, command: list[str], env: dict[str, str], log_dir: Path):
        self.log_path = log_dir / f"{self.name}-{self.port}.log"
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        if not wait_until_ready(self.root, self.process, seconds=60):
            self.stop()
            tail = self.log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{self.name} not ready (exit {self.process.returncode}):\n{tail}")

    @property
    def api(self) -> str:
        return f"{self.root}/api/v1"

    def stop(self) -> None:
        """SIGTERM (graceful), then SIGKILL if it lingers."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


# a report's wall time may exceed the time since its match by this much on the benchmark's
# server: more than the longest job its pilots report (bench.lifecycle_pilots.done_body)
COMPRESSED_HOURS_S = 200_000


class Server(Service):
    """`fairmatch serve --workers N` (its server log: server-<port>.log)."""

    name = "server"
    exposes_metrics = True

    def __init__(self, url: str, workers: int, log_dir: Path, work_dir: Path, settings: Mapping[str, str] = {}):
        # settings: FAIRMATCH_* variables a section sets on top of the defaults
        self.port = free_port()
        self.root = f"http://127.0.0.1:{self.port}"
        config = work_dir / "empty.toml"
        config.write_text("# every setting is a default or comes from the environment\n")
        env = {
            **os.environ,
            "FAIRMATCH_DATABASE_URL": url,
            "FAIRMATCH_CONFIG": str(config),
            "FAIRMATCH_SERVER__ACCESS_LOG": "false",
            "FAIRMATCH_SERVER__LOG_LEVEL": "warning",
            # the pilots report jobs of hours that lived milliseconds: the bound on the time a report
            # states is checked on every report, against a clock skew that lets those hours through
            "FAIRMATCH_JOBS__CLOCK_SKEW_SECONDS": str(COMPRESSED_HOURS_S),
            **settings,
        }
        command = [str(Path(sys.executable).with_name("fairmatch")), "serve", "--host", "127.0.0.1",
                   "--port", str(self.port), "--workers", str(workers)]  # fmt: skip
        super().__init__(command, env, log_dir)

    def recompute(self) -> tuple[float, dict]:
        """POST /priorities/recompute; (seconds as the client saw them, the answer)."""
        started = time.perf_counter()
        r = httpx.post(f"{self.api}/priorities/recompute", timeout=600)
        seconds = time.perf_counter() - started
        r.raise_for_status()
        return seconds, r.json()


class LeanServer(Service):
    """The lean claim service, bench/references/lean_claim.py (log: lean-<port>.log)."""

    name = "lean"
    application_name = LEAN_APPLICATION_NAME
    script = REPO / "bench" / "references" / "lean_claim.py"

    def __init__(self, url: str, workers: int, log_dir: Path, pool: int = 10):
        self.port = free_port()
        self.root = f"http://127.0.0.1:{self.port}"
        self.workers, self.pool = workers, pool
        command = [sys.executable, str(self.script), "--url", url, "--port", str(self.port),
                   "--workers", str(workers), "--pool", str(pool)]  # fmt: skip
        super().__init__(command, dict(os.environ), log_dir)


def _first_line(command: list[str]) -> str | None:
    if shutil.which(command[0]) is None:
        return None
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0] if lines else None


def _cpu_model() -> str:
    try:
        found = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.MULTILINE)
    except OSError:
        found = None
    return found.group(1).strip() if found else platform.processor() or platform.machine()


def _ram_gib() -> float | None:
    try:
        kib = int(re.search(r"^MemTotal:\s+(\d+) kB", Path("/proc/meminfo").read_text(), re.MULTILINE).group(1))
    except (OSError, AttributeError):
        return None
    return round(kib / 2**20, 1)


def _git(*args: str) -> str | None:
    done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else None


def machine(admin_url: str) -> dict:
    """CPU, memory, versions and the PostgreSQL settings that shape the figures."""
    with psycopg.connect(database_url(admin_url, _admin_db(admin_url)), autocommit=True) as conn:
        version = conn.execute("SELECT version()").fetchone()[0]
        settings = dict(
            conn.execute(
                "SELECT name, setting || COALESCE(unit, '') FROM pg_settings WHERE name = ANY(%s)", (list(PG_SETTINGS),)
            ).fetchall()
        )
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "cpu_model": _cpu_model(),
        "cores": os.cpu_count(),
        "ram_gib": _ram_gib(),
        "os": platform.platform(),
        # other work on the machine skews every figure: see it at the start
        "load_average_at_start": os.getloadavg(),
        "python": platform.python_version(),
        "postgresql": version,
        "postgresql_settings": settings,
        "fairmatch_version": metadata.version("fairmatch"),
        "fairmatch_commit": _git("rev-parse", "HEAD"),
        "fairmatch_tree_modified": bool(status) if status is not None else None,
        "wrk": _first_line(["wrk", "-v"]),
        "pgbench": _first_line(["pgbench", "--version"]),
    }
