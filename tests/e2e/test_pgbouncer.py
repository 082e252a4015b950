"""fairmatch behind a real PgBouncer in transaction mode (PostgreSQL only, docs/how-to/pgbouncer.md).

The set-up installs Debian's `pgbouncer` when it is missing (a failed
install fails the tests, it never skips them) and runs it with
`pool_mode = transaction` and a server pool of POOL_SIZE connections, far
fewer than the service's clients, so that every transaction may run on
another server connection than the one before. Then, through it, with
`database.prepared_statements = false`:

- `fairmatch db upgrade` migrates and `fairmatch serve --workers 2` starts;
- 16 concurrent pilots drain a few hundred jobs: each job is handed out
  exactly once and nothing fails; the clients really outnumbered the
  server connections;
- the priority loop's transaction-scoped advisory lock holds: a recompute
  waits while another session holds the lock, and concurrent recomputes
  all succeed, one after the other;
- the lease sweep returns an unconfirmed Matched job to Waiting.

And the setting matters: with prepared statements on (the default), the
same pilots through the same kind of PgBouncer hit psycopg's prepared
statements missing (or already present) on the server connection they
were given.
"""

from __future__ import annotations

import itertools
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import httpx
import psycopg
import pytest
from sqlalchemy.engine import make_url

from fairmatch.db.priority_runs import PRIORITY_LOCK
from tests.conftest import (
    BACKENDS,
    PG_ADMIN_URL,
    clear_tables,
    create_pg_database,
    drop_pg_database,
    free_port,
    pg_url,
    wait_until_ready,
)
from tests.conftest import TestDatabase as PgDatabase  # not a test class
from tests.debian_tools import debian_tool

FAIRMATCH = Path(sys.executable).with_name("fairmatch")  # the venv's console script
POOL_SIZE = 4  # server connections per (database, user): far fewer than the service's clients
PILOTS = 16
JOBS = 400
PILOT = {"Site": "LCG.CERN.cern", "CPUTime": 10**7, "Platform": "x86_64-el9"}
PREPARED_STATEMENT_ERRORS = ("prepared statement", "_pg3_")
# psycopg names its prepared statements _pg3_0, _pg3_1, … per client connection (the log is JSON: \")
LOST_PREPARED_STATEMENT = re.compile(r'prepared statement \\?"_pg3_\d+\\?" (does not exist|already exists)')


# --- PgBouncer ------------------------------------------------------------------------


@dataclass
class PgBouncer:
    """One pgbouncer process in front of the test PostgreSQL, for one database."""

    dbname: str
    directory: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None

    @property
    def user(self) -> str:
        return make_url(PG_ADMIN_URL).username or "postgres"

    @property
    def url(self) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{self.dbname}"

    @property
    def log_path(self) -> Path:
        return self.directory / "pgbouncer.log"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def start(self, binary: str) -> PgBouncer:
        server = make_url(PG_ADMIN_URL)
        user = self.user
        # clients are trusted; the password (if the test server wants one) is what pgbouncer logs in with
        (self.directory / "userlist.txt").write_text(f'"{user}" "{server.password or ""}"\n')
        config = self.directory / "pgbouncer.ini"
        config.write_text(
            f"""\
[databases]
{self.dbname} = host={server.host or "127.0.0.1"} port={server.port or 5432} dbname={self.dbname}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir =
auth_type = trust
auth_file = {self.directory / "userlist.txt"}
admin_users = {user}
pool_mode = transaction
default_pool_size = {POOL_SIZE}
min_pool_size = 0
reserve_pool_size = 0
max_db_connections = {POOL_SIZE}
max_client_conn = 1000
"""
        )
        run_as: dict = {}
        if os.geteuid() == 0:  # pgbouncer refuses to run as root: run it as postgres (or nobody)
            try:
                account = pwd.getpwnam("postgres")
            except KeyError:
                account = pwd.getpwnam("nobody")
            for path in (self.directory, *self.directory.iterdir()):
                os.chown(path, account.pw_uid, account.pw_gid)
            run_as = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}
        # no logfile setting: it logs to stderr, into a file opened here
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen([binary, str(config)], stdout=log, stderr=subprocess.STDOUT,
                                            cwd=self.directory, **run_as)  # fmt: skip
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                with psycopg.connect(self.url, connect_timeout=2, prepare_threshold=None) as conn:
                    conn.execute("SELECT 1")
                return self
            except psycopg.OperationalError:
                time.sleep(0.1)
        self.stop()
        pytest.fail(f"pgbouncer did not accept connections (exit {self.process.returncode}):\n{self.log()}",
                    pytrace=False)  # fmt: skip

    def pools(self) -> dict:
        """Our database's row of SHOW POOLS on the admin console (simple query protocol only)."""
        admin = f"postgresql://{self.user}@127.0.0.1:{self.port}/pgbouncer"
        with psycopg.connect(admin, autocommit=True, cursor_factory=psycopg.ClientCursor) as conn:
            cursor = conn.execute("SHOW POOLS")
            names = [c.name for c in cursor.description]
            rows = [dict(zip(names, row)) for row in cursor.fetchall()]
        return next(r for r in rows if r["database"] == self.dbname)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)  # SIGTERM: immediate shutdown
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture(scope="module")
def pg_database() -> Iterator[PgDatabase]:
    if "postgresql" not in BACKENDS:
        pytest.skip("PgBouncer stands in front of PostgreSQL; FAIRMATCH_TEST_BACKENDS leaves it out")
    name = create_pg_database()
    url = pg_url(name)
    yield PgDatabase("postgresql", url, url.replace("postgresql://", "postgresql+psycopg://"))
    drop_pg_database(name)


@pytest.fixture(scope="module")
def bouncer_factory(pg_database) -> Iterator[Callable[[], PgBouncer]]:
    """Start pgbouncers for the module's database; all stopped at the end of the module."""
    binary = debian_tool("pgbouncer")
    started: list[PgBouncer] = []
    directories: list[Path] = []

    def start() -> PgBouncer:
        # a directory of its own the postgres account can reach (pytest's tmp dirs are root's alone)
        directory = Path(tempfile.mkdtemp(prefix="fairmatch-pgbouncer-"))
        directories.append(directory)
        bouncer = PgBouncer(pg_database.url.rsplit("/", 1)[1], directory)
        started.append(bouncer)
        return bouncer.start(binary)

    yield start
    for bouncer in started:
        bouncer.stop()
    for directory in directories:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def bouncer(bouncer_factory) -> PgBouncer:
    return bouncer_factory()


# --- fairmatch through it ---------------------------------------------------------------


class Services:
    """`fairmatch` commands and `fairmatch serve --workers 2` processes on a database URL."""

    def __init__(self, directory: Path, database_url: str, **settings: str) -> None:
        self.directory = directory
        config = directory / "empty.toml"
        config.write_text("# settings come from the environment\n")
        inherited = {k: v for k, v in os.environ.items()
                     if k != "PROMETHEUS_MULTIPROC_DIR" and not k.startswith("FAIRMATCH_")}  # fmt: skip
        self.env = {
            **inherited,
            "FAIRMATCH_CONFIG": str(config),
            "FAIRMATCH_DATABASE_URL": database_url,
            **{f"FAIRMATCH_{k.upper()}": str(v) for k, v in settings.items()},
        }
        self.processes: dict[int, subprocess.Popen] = {}

    def run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([FAIRMATCH, *args], env=self.env, cwd=self.directory,
                              capture_output=True, text=True, timeout=120)  # fmt: skip

    def serve(self, **settings: str) -> str:
        port = free_port()
        env = {
            **self.env,
            "FAIRMATCH_SERVER__METRICS_DIR": str(self.directory / f"metrics-{port}"),
            **{f"FAIRMATCH_{k.upper()}": str(v) for k, v in settings.items()},
        }
        with (self.directory / f"serve-{port}.log").open("wb") as log:
            self.processes[port] = subprocess.Popen(
                [FAIRMATCH, "serve", "--port", str(port), "--workers", "2"],
                env=env, cwd=self.directory, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        if not wait_until_ready(url, self.processes[port], seconds=60):
            pytest.fail(f"fairmatch serve on {port} not ready:\n{self.log(port)}", pytrace=False)
        return url

    def log(self, port: int | None = None) -> str:
        ports = [port] if port else list(self.processes)
        return "\n".join((self.directory / f"serve-{p}.log").read_text(errors="replace") for p in ports)

    def stop(self) -> list[int | None]:
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        codes = []
        for process in self.processes.values():
            try:
                codes.append(process.wait(timeout=30))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                codes.append(None)
        return codes


@pytest.fixture(scope="module")
def migrated(bouncer, tmp_path_factory) -> PgBouncer:
    """The module's database, migrated by `fairmatch db upgrade` through the pgbouncer."""
    services = Services(tmp_path_factory.mktemp("migrate"), bouncer.url, DATABASE__PREPARED_STATEMENTS="false")
    done = services.run("db", "upgrade")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "upgraded from none to" in done.stdout, done.stdout
    current = services.run("db", "current")
    assert current.returncode == 0 and "up to date" in current.stdout, current.stdout + current.stderr
    return bouncer


@pytest.fixture
def behind_bouncer(migrated, pg_database, tmp_path) -> Iterator[Services]:
    """Servers of the test, through the pgbouncer without prepared statements, on emptied tables."""
    clear_tables(pg_database)
    services = Services(tmp_path, migrated.url, DATABASE__PREPARED_STATEMENTS="false")
    yield services
    services.stop()


def submit(client: httpx.Client, specs: list[dict]) -> list[int]:
    r = client.post("/jobs", json={"jobs": specs})
    assert r.status_code == 201, r.text
    return [j["job_id"] for j in r.json()["jobs"]]


def job_specs(n: int) -> list[dict]:
    """Jobs over 12 TQs (3 groups x 2 owners x 2 CPU buckets), two user-priority levels in each."""
    return [
        {"owner": f"user{i % 2}", "owner_group": f"group{i % 3}", "cpu_time": 3600 if i % 4 < 2 else 86400,
         "sites": ["LCG.CERN.cern"], "platforms": ["x86_64-el9"], "user_priority": 1 + i % 5 // 3}
        for i in range(n)
    ]  # fmt: skip


def drain(url: str, pilots: int, rounds: int, name: str = "pilot") -> list[tuple[str, int, int | None, str]]:
    """`pilots` concurrent pilots, each matching until told 204 (at most `rounds` asks).

    Returns (pilot, status, job id, body) per answer."""
    barrier = threading.Barrier(pilots)

    def pilot(n: int) -> list[tuple[str, int, int | None, str]]:
        answers = []
        with httpx.Client(base_url=f"{url}/api/v1", timeout=60) as client:
            barrier.wait(timeout=30)
            for ask in range(rounds):
                body = {**PILOT, "PilotReference": f"{name}-{n}", "request_id": f"{name}-{n}-{ask}"}
                r = client.post("/match", json=body)
                answers.append((f"{name}-{n}", r.status_code, r.json()["job_id"] if r.status_code == 200 else None,
                                "" if r.status_code in (200, 204) else r.text))  # fmt: skip
                if r.status_code == 204:
                    break
        return answers

    with ThreadPoolExecutor(max_workers=pilots) as pool:
        return [a for f in [pool.submit(pilot, n) for n in range(pilots)] for a in f.result(timeout=240)]


def direct(pg_database: PgDatabase, sql: str) -> list[tuple]:
    with psycopg.connect(pg_database.url) as conn:
        return conn.execute(sql).fetchall()


# --- the tests ---------------------------------------------------------------------------


def test_concurrent_pilots_each_get_their_own_job(behind_bouncer, migrated, pg_database):
    url = behind_bouncer.serve()
    with httpx.Client(base_url=f"{url}/api/v1", timeout=60) as client:
        submitted = submit(client, job_specs(JOBS // 2)) + submit(client, job_specs(JOBS - JOBS // 2))

    answers = drain(url, PILOTS, rounds=JOBS)
    # a pilot may be told 204 while a claim it lost left a job behind: one more sweep
    answers += drain(url, 1, rounds=JOBS, name="sweeper")

    assert Counter(status for _, status, _, _ in answers).keys() <= {200, 204}, [
        (status, body) for _, status, _, body in answers if status not in (200, 204)
    ][:5]
    handed = Counter(job for _, status, job, _ in answers if status == 200)
    assert [j for j, n in handed.items() if n > 1] == [], "jobs handed out twice"
    assert set(handed) == set(submitted) and len(handed) == JOBS

    assert dict(direct(pg_database, "SELECT status, count(*) FROM jobs GROUP BY status")) == {"Matched": JOBS}
    assert direct(pg_database, "SELECT count(*) FROM tq_jobs") == [(0,)]
    given = dict(direct(pg_database, "SELECT id, pilot_reference FROM jobs"))
    assert given == {job: pilot for pilot, status, job, _ in answers if status == 200}
    events = direct(pg_database, "SELECT job_id, count(*) FROM job_events WHERE status = 'Matched' GROUP BY job_id")
    assert len(events) == JOBS and {n for _, n in events} == {1}

    # the server connections really were shared: the service's clients outnumber them
    pools = migrated.pools()
    servers = sum(pools[k] for k in ("sv_active", "sv_idle", "sv_used", "sv_tested", "sv_login"))
    clients = pools["cl_active"] + pools["cl_waiting"]
    assert servers <= POOL_SIZE, pools
    assert clients > POOL_SIZE, pools
    log = behind_bouncer.log()
    assert not any(s in log for s in PREPARED_STATEMENT_ERRORS), log[-3000:]


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def lock_waiters(pg_database: PgDatabase) -> int:
    """Sessions waiting for the priority lock (a bigint key shows as classid = high, objid = low 32 bits)."""
    rows = direct(pg_database, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                               f"AND classid = {PRIORITY_LOCK >> 32} AND objid = {PRIORITY_LOCK & 0xFFFFFFFF}")  # fmt: skip
    return rows[0][0]


def test_the_priority_lock_serialises_recomputes(behind_bouncer, pg_database):
    url = behind_bouncer.serve()
    with httpx.Client(base_url=f"{url}/api/v1", timeout=60) as client:
        submit(client, job_specs(60))
        assert client.post("/priorities/recompute").status_code == 200

        # another session (straight to PostgreSQL) holds the lock: a forced run waits for it
        holder = psycopg.connect(pg_database.url)
        try:
            holder.execute("SELECT pg_advisory_xact_lock(%s)", [PRIORITY_LOCK])
            with ThreadPoolExecutor(max_workers=1) as pool:
                waiting = pool.submit(client.post, "/priorities/recompute")
                deadline = time.monotonic() + 15
                while not waiting.done() and not lock_waiters(pg_database) and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert lock_waiters(pg_database) == 1, "the recompute is not waiting for the lock"
                time.sleep(1)
                assert not waiting.done(), waiting.result().text
                holder.rollback()  # the transaction ends, the lock goes with it
                answer = waiting.result(timeout=30)
        finally:
            holder.close()
        assert answer.status_code == 200, answer.text

    # concurrent forced runs through both workers all succeed, one after the other
    def recompute(_: int) -> httpx.Response:
        with httpx.Client(base_url=f"{url}/api/v1", timeout=120) as c:
            return c.post("/priorities/recompute")

    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(recompute, range(8)))
    assert [r.status_code for r in answers] == [200] * 8, [r.text for r in answers if r.status_code != 200]
    runs = sorted((parse_time(r.json()["started_at"]), parse_time(r.json()["finished_at"])) for r in answers)
    overlapping = [(a, b) for a, b in itertools.pairwise(runs) if b[0] < a[1]]
    assert overlapping == [], "two recomputes ran at the same time"
    assert direct(pg_database, "SELECT count(*) FROM priority_runs")[0][0] >= 10  # every forced run ran
    log = behind_bouncer.log()
    assert not any(s in log for s in PREPARED_STATEMENT_ERRORS), log[-3000:]


def test_the_lease_sweep_returns_an_unconfirmed_match_to_waiting(behind_bouncer, pg_database):
    url = behind_bouncer.serve(JOBS__MATCHED_LEASE_SECONDS="1", JOBS__LEASE_SWEEP_SECONDS="0.3")
    with httpx.Client(base_url=f"{url}/api/v1", timeout=60) as client:
        submitted = submit(client, job_specs(2))
        confirmed = client.post("/match", json=PILOT).json()["job_id"]
        forgotten = client.post("/match", json=PILOT).json()["job_id"]
        assert {confirmed, forgotten} == set(submitted)
        assert client.post(f"/jobs/{confirmed}/status", json={"status": "Running"}).status_code == 200

        deadline = time.monotonic() + 15
        while client.get(f"/jobs/{forgotten}").json()["status"] != "Waiting" and time.monotonic() < deadline:
            time.sleep(0.1)
        job = client.get(f"/jobs/{forgotten}").json()
        assert job["status"] == "Waiting", job
        assert job["minor_status"] == "matched lease expired" and job["lease_expires_at"] is None
        assert client.get(f"/jobs/{confirmed}").json()["status"] == "Running"
        assert client.post("/match", json=PILOT).json()["job_id"] == forgotten
    sources = direct(pg_database, f"SELECT status, source FROM job_events WHERE job_id = {int(forgotten)} ORDER BY id")
    assert sources == [("Waiting", "submit"), ("Matched", "match"), ("Waiting", "lease"), ("Matched", "match")]


def test_with_prepared_statements_on_transaction_pooling_breaks(bouncer_factory, migrated, pg_database, tmp_path):
    """The default (psycopg prepares a statement after its 5th run on a connection) through a
    pgbouncer of its own in transaction mode: the prepared statement is missing on the next
    server connection, or already there under the same name from another client."""
    clear_tables(pg_database)
    own = bouncer_factory()
    services = Services(tmp_path, own.url)  # database.prepared_statements left at its default
    try:
        url = services.serve()
        with httpx.Client(base_url=f"{url}/api/v1", timeout=60) as client:
            submit(client, job_specs(JOBS))
        answers = drain(url, PILOTS, rounds=JOBS)
        failed = [(status, body) for _, status, _, body in answers if status not in (200, 204)]
        log = services.log()
    finally:
        services.stop()
        own.stop()
    assert failed, f"{len(answers)} matches through transaction pooling with prepared statements all succeeded"
    assert LOST_PREPARED_STATEMENT.search(log), log[-3000:]
