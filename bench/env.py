"""The benchmark's surroundings: its database, autovacuum, the services under
test, the CPU each side spends and the facts about the machine."""

from __future__ import annotations

import contextlib
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path

import httpx
import psycopg
from sqlalchemy.engine import make_url

from fairmatch.db import migrate

REPO = Path(__file__).resolve().parent.parent
LEAN_SCRIPT = Path(__file__).with_name("references") / "lean_claim.py"
# the pilots report jobs of hours that lived milliseconds: the clock skew lets such reports through
COMPRESSED_HOURS_S = 200_000
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def database_url(admin_url: str, name: str) -> str:
    """The admin URL pointed at database `name`, in libpq form."""
    return make_url(admin_url).set(drivername="postgresql", database=name).render_as_string(hide_password=False)


def query(url: str, statement: str, params: tuple = ()) -> list[tuple]:
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


def fresh_database(admin_url: str, name: str) -> str:
    """Drop database `name`, create it empty and migrate it to head; return its URL."""
    drop_database(admin_url, name)
    query(database_url(admin_url, "postgres"), f'CREATE DATABASE "{name}"')
    url = database_url(admin_url, name)
    migrate.upgrade(url)
    return url


def drop_database(admin_url: str, name: str) -> None:
    query(database_url(admin_url, "postgres"), f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def waiting_jobs(url: str) -> int:
    return query(url, "SELECT count(*) FROM tq_jobs")[0][0]


@contextmanager
def autovacuum(admin_url: str, turn_on: bool, log: Callable[[str], object]) -> Iterator[dict]:
    """Sites run autovacuum. A server that has it off gets it on for the run when
    `turn_on` (ALTER SYSTEM and a reload, undone however the run ends: RESET, or
    the value ALTER SYSTEM had set before); otherwise the run is reported as
    made without it. Yields what was seen and done, for the results."""
    url = database_url(admin_url, "postgres")
    before, source = query(url, "SELECT setting, COALESCE(sourcefile, '') FROM pg_settings WHERE name = 'autovacuum'")[
        0
    ]
    state = {"server_setting": before, "turned_on": turn_on and before != "on"}
    if not state["turned_on"]:
        if before != "on":
            log("autovacuum is OFF on this server: the figures are not what a site sees (see --autovacuum)")
        yield state
        return
    restore = f"ALTER SYSTEM SET autovacuum = {before}" if source.endswith("postgresql.auto.conf") else None
    previous = signal.signal(signal.SIGTERM, lambda signum, _: sys.exit(128 + signum))
    try:
        _reload(url, "ALTER SYSTEM SET autovacuum = on")
        log("autovacuum turned on for the run (ALTER SYSTEM); it is put back at the end")
        yield state
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the restore short
        _reload(url, restore or "ALTER SYSTEM RESET autovacuum")
        signal.signal(signal.SIGTERM, previous)
        log(f"autovacuum put back to {before}")


def _reload(url: str, statement: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(statement)
        conn.execute("SELECT pg_reload_conf()")
    time.sleep(0.5)  # new sessions see the reloaded setting within moments


def wait_until_ready(root: str, process: subprocess.Popen, seconds: float = 180) -> bool:
    """Poll GET {root}/readyz until it answers 200; False if `process` exits or time runs out."""
    deadline = time.monotonic() + seconds
    with httpx.Client(timeout=1) as client:
        while time.monotonic() < deadline and process.poll() is None:
            with contextlib.suppress(httpx.TransportError):
                if client.get(f"{root}/readyz").status_code == 200:
                    return True
            time.sleep(0.1)
    return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Service:
    """A service under test on a free loopback port, ready once GET /readyz answers
    200, stopped with SIGTERM; its output goes to `<log_dir>/<name>-<port>.log`."""

    def __init__(self, name: str, command: list[str], env: Mapping[str, str], log_dir: Path):
        self.name, self.port = name, free_port()
        self.root = f"http://127.0.0.1:{self.port}"
        self.api = f"{self.root}/api/v1"
        self.log_path = log_dir / f"{name}-{self.port}.log"
        with self.log_path.open("ab") as log:
            command = [c.replace("{port}", str(self.port)) for c in command]
            self.process = subprocess.Popen(command, env={**os.environ, **env}, stdout=log, stderr=log, cwd=REPO)
        if not wait_until_ready(self.root, self.process):
            self.stop()
            raise RuntimeError(
                f"{name} not ready (exit {self.process.returncode}):\n{self.log_path.read_text()[-3000:]}"
            )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def fairmatch_server(url: str, workers: int, log_dir: Path, settings: Mapping[str, str] = {}) -> Service:
    """`fairmatch serve --workers N` on the benchmark's database; `settings`: FAIRMATCH_* on top of the defaults."""
    config = log_dir / "empty.toml"
    config.write_text("# every setting is a default or comes from the environment\n")
    env = {"FAIRMATCH_DATABASE_URL": url, "FAIRMATCH_CONFIG": str(config), "FAIRMATCH_SERVER__ACCESS_LOG": "false",
           "FAIRMATCH_SERVER__LOG_LEVEL": "warning", "FAIRMATCH_JOBS__CLOCK_SKEW_SECONDS": str(COMPRESSED_HOURS_S),
           **settings}  # fmt: skip
    command = [str(Path(sys.executable).with_name("fairmatch")), "serve", "--host", "127.0.0.1", "--port", "{port}",
               "--workers", str(workers)]  # fmt: skip
    return Service("fairmatch", command, env, log_dir)


def lean_server(url: str, workers: int, log_dir: Path) -> Service:
    """The leanest Python claim service (bench/references/lean_claim.py), as many workers as fairmatch."""
    command = [sys.executable, str(LEAN_SCRIPT), "--url", url, "--port", "{port}", "--workers", str(workers)]
    return Service("lean", command, {}, log_dir)


def recompute(service: Service) -> dict:
    """POST /priorities/recompute, as the periodic run does; a 503 (a run already under way) is tried again."""
    for _ in range(30):
        r = httpx.post(f"{service.api}/priorities/recompute", timeout=600)
        if r.status_code != 503:
            break
        time.sleep(2)
    r.raise_for_status()
    return r.json()


# --- CPU per side, from /proc: the service's process tree, PostgreSQL's sessions of
# the benchmark's database with its own background processes, the load generator


def _proc_stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, CPU ticks of the process and its reaped children)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = text[text.rindex(")") + 2 :].split()  # the command may hold spaces and parentheses
    return int(rest[1]), sum(int(v) for v in rest[11:15])


def tree_ticks(root: int) -> dict[int, int]:
    """CPU ticks of `root` and of every process under it, by pid."""
    table = {int(e.name): s for e in os.scandir("/proc") if e.name.isdigit() and (s := _proc_stat(int(e.name)))}
    todo, ticks = [root], {}
    while todo:
        pid = todo.pop()
        ticks[pid] = table.get(pid, (0, 0))[1]
        todo.extend(p for p, (parent, _) in table.items() if parent == pid)
    return ticks


SESSIONS = """SELECT pid FROM pg_stat_activity WHERE pid <> pg_backend_pid()
AND (datname = current_database() OR (datname IS NULL AND backend_type <> 'client backend'))"""


class CpuMeter:
    """CPU seconds between start() and stop(): `service` (its process tree) and
    PostgreSQL (this database's sessions and its own processes; a session that
    ends during the run takes its CPU with it, one new counts from zero)."""

    def __init__(self, service_pid: int, url: str):
        self.service_pid, self.url = service_pid, url

    def _read(self) -> tuple[int, dict[int, int]]:
        sessions = {pid: s[1] for (pid,) in query(self.url, SESSIONS) if (s := _proc_stat(pid))}
        return sum(tree_ticks(self.service_pid).values()), sessions

    def start(self) -> None:
        self._service, self._sessions = self._read()

    def stop(self) -> dict[str, float]:
        service, sessions = self._read()
        postgres = sum(t - self._sessions.get(pid, 0) for pid, t in sessions.items())
        return {"service": (service - self._service) / CLOCK_TICKS, "postgres": postgres / CLOCK_TICKS}


def machine(admin_url: str) -> dict:
    """CPU, memory, versions and the PostgreSQL settings that shape the figures."""
    names = ["shared_buffers", "max_connections", "synchronous_commit", "fsync", "autovacuum"]
    settings = dict(query(database_url(admin_url, "postgres"),
                          "SELECT name, setting || COALESCE(unit, '') FROM pg_settings WHERE name = ANY(%s)", (names,)))  # fmt: skip
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.machine())  # fmt: skip
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return {
        "cpu": cpu, "cores": os.cpu_count(), "load_average_at_start": round(os.getloadavg()[0], 2),
        "python": platform.python_version(), "fairmatch": metadata.version("fairmatch"),
        "commit": commit.stdout.strip() or None,
        "postgresql": query(database_url(admin_url, "postgres"), "SHOW server_version")[0][0],
        "postgresql_settings": settings,
    }  # fmt: skip
