"""Test infrastructure: real databases (SQLite file and PostgreSQL), and the service served
either by real uvicorn servers or inside the test process.

Backends come from FAIRMATCH_TEST_BACKENDS (default "sqlite,postgresql"); the
PostgreSQL server from FAIRMATCH_TEST_PG_URL. Each session creates its own
PostgreSQL database and drops it at the end. An unreachable PostgreSQL is an
error, never a silent skip.

Where the servers run, by directory (the fixtures keep their names, so a module
moves by moving its file):

- tests/api/: the HTTP API's contract (bad and hostile input, eligibility, the
  lifecycle, job classes, groups, concurrency on one server, fair share through
  the API, the smoke test). What they test is the application, so it is served in
  process (tests/asgi_server.py): the same application, lifespan and background
  loops as in a uvicorn worker, with no server to start or to wake. Only
  test_hostile_input's body limits (chunked uploads, a reused connection)
  start a real uvicorn of their own.
- tests/e2e/ (marked `e2e`): real uvicorn over real HTTP, where the server or
  the processes are the subject or a client needs a URL: the CLI talking to a
  server (test_cli, test_associations, test_policies' sprio and
  sshare, test_usage_accounting's sshare, test_simulate_from), start, stop and
  signals (test_leases_and_shutdown, test_usage_lag), workers and metrics across
  processes (test_metrics, test_two_replicas), two servers on one database
  (test_priority_loop, test_site_limits, test_task_queue_catalog), PgBouncer,
  schemathesis over the wire, tokens next to `fairmatch serve`'s refusal
  to listen without them (test_auth), the documentation's commands run as
  written, each page with servers of its own (test_docs_run).
- tests/fault/: real servers against a PostgreSQL cluster of their own that
  the tests stop and restart, or a Patroni pair whose primary they kill.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import sqlalchemy as sa

from fairmatch.auth.settings import AuthSettings
from fairmatch.auth.tokens import Role, create_token
from fairmatch.db import migrate
from fairmatch.db.priority_runs import PRIORITY_LOCK
from fairmatch.db.tables import metadata
from tests.asgi_server import InProcessServer, settings_of
from tests.forked_server import ForkedServerProcess

REPO = Path(__file__).resolve().parent.parent


def wait_until_ready(root: str, process: subprocess.Popen, seconds: float = 15) -> bool:
    """Poll GET {root}/readyz until it answers 200; False if `process` exits or time runs out.
    Also imported from here by the test modules that start servers of their own."""
    deadline = time.monotonic() + seconds
    with httpx.Client(timeout=1) as client:  # one client: making one per poll costs ~30 ms of CPU
        while time.monotonic() < deadline and process.poll() is None:
            try:
                if client.get(f"{root}/readyz").status_code == 200:
                    return True
            except httpx.TransportError:
                pass
            time.sleep(0.1)
    return False


BACKENDS = [b.strip() for b in os.environ.get("FAIRMATCH_TEST_BACKENDS", "sqlite,postgresql").split(",") if b.strip()]
PG_ADMIN_URL = os.environ.get("FAIRMATCH_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


@dataclass
class TestDatabase:
    __test__ = False  # a fixture's value, not a test class, wherever it is imported

    backend: str
    url: str  # what the service is given
    sync_url: str  # what the tests use to look inside

    def engine(self) -> sa.Engine:
        return sa.create_engine(self.sync_url, poolclass=sa.pool.NullPool)


def pg_url(dbname: str) -> str:
    base = PG_ADMIN_URL.rsplit("/", 1)[0]
    return f"{base}/{dbname}"


def create_pg_database() -> str:
    name = f"fairmatch_test_{uuid.uuid4().hex[:12]}"
    try:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as exc:
        pytest.fail(
            f"PostgreSQL is not reachable at {PG_ADMIN_URL} ({exc}). Start it, or run only "
            "SQLite with FAIRMATCH_TEST_BACKENDS=sqlite.",
            pytrace=False,
        )
    return name


def drop_pg_database(name: str) -> None:
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def new_database(backend: str, directory: Path) -> tuple[TestDatabase, Callable[[], None]]:
    """An empty database of the backend and the function that removes it."""
    if backend == "sqlite":
        path = directory / f"fairmatch-{uuid.uuid4().hex[:8]}.db"
        return TestDatabase("sqlite", f"sqlite:///{path}", f"sqlite:///{path}"), lambda: None
    if backend == "postgresql":
        name = create_pg_database()
        url = pg_url(name)
        return (
            TestDatabase("postgresql", url, url.replace("postgresql://", "postgresql+psycopg://")),
            lambda: drop_pg_database(name),
        )
    raise pytest.UsageError(f"unknown backend {backend!r} in FAIRMATCH_TEST_BACKENDS")


def migrated_database(backend: str, directory: Path) -> tuple[TestDatabase, Callable[[], None]]:
    """A new database of the backend at the schema's head, and the function that removes it."""
    db, remove = new_database(backend, directory)
    try:
        migrate.upgrade(db.url)
    except BaseException:
        remove()
        raise
    return db, remove


class PerBackend(dict):
    """A session's things of each backend (databases, servers), made when first asked for.

    Tests of both backends are spread over the workers in any order; keeping the
    things here, not in a parametrised session fixture, means that switching
    backend rebuilds nothing.
    """

    def __init__(self, make: Callable[[str], tuple[object, Callable[[], None]]]) -> None:
        super().__init__()
        self._make = make
        self._undo: list[Callable[[], None]] = []

    def __missing__(self, backend: str):
        thing, undo = self._make(backend)
        self._undo.append(undo)
        self[backend] = thing
        return thing

    def close(self) -> None:
        for undo in reversed(self._undo):
            undo()


@pytest.fixture(scope="session")
def databases(tmp_path_factory) -> Iterator[PerBackend]:
    """A migrated database per backend, shared by the session."""

    cache = PerBackend(lambda backend: migrated_database(backend, tmp_path_factory.mktemp(backend)))
    try:
        yield cache
    finally:
        cache.close()


@pytest.fixture(scope="session", params=BACKENDS)
def database(request, databases) -> TestDatabase:
    """The session's migrated database of this test's backend."""
    return databases[request.param]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    url: str
    process: ForkedServerProcess
    log_path: Path
    env: dict = field(default_factory=dict)

    @property
    def api(self) -> str:
        return f"{self.url}/api/v1"

    def client(self, **kwargs) -> httpx.Client:
        # plain http on loopback: skip building a TLS context (~30 ms a client)
        return httpx.Client(base_url=self.api, timeout=30, verify=False, **kwargs)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_server(db: TestDatabase, directory: Path, **settings: str) -> Server:
    """A real uvicorn on a free loopback port, ready when /readyz says so; forked from a
    process that has imported the service (tests/forked_server.py).

    `settings` are FAIRMATCH_* environment overrides, e.g. MATCHING__LOTTERY="dirac".
    """
    port = free_port()
    config = directory / f"empty-{port}.toml"
    config.write_text("# settings come from the environment in tests\n")
    env = {
        **os.environ,
        "FAIRMATCH_CONFIG": str(config),
        "FAIRMATCH_DATABASE_URL": db.url,
        **{f"FAIRMATCH_{k.upper()}": str(v) for k, v in settings.items()},
    }
    log_path = directory / f"server-{port}.log"
    process = ForkedServerProcess(env, port, log_path, REPO)
    server = Server(f"http://127.0.0.1:{port}", process, log_path, env)
    if wait_until_ready(server.url, process, seconds=30):
        return server
    server.stop()
    pytest.fail(f"server not ready within 30 s (exit {process.returncode}):\n{server.log()}", pytrace=False)


def start_in_process(db: TestDatabase, directory: Path, **settings: str) -> InProcessServer:
    """The application served in this process (tests/asgi_server.py), with the settings
    `start_server` would give a real server."""
    config = directory / "empty.toml"
    config.write_text("# settings come from the environment in tests\n")
    return InProcessServer(settings_of(config, db.url, **settings), directory / "server.log")


# how a directory's tests start their servers: real uvicorn; in process under tests/api/
AnyServer = Server | InProcessServer
Start = Callable[..., AnyServer]


def servers_of(
    databases: PerBackend, tmp_path_factory, name: str, start: Start = start_server, **settings: str
) -> Iterator[PerBackend]:
    """For a session fixture: per backend, a server with these settings on the session's database,
    started when first asked for and stopped at the end."""

    def make(backend: str) -> tuple[AnyServer, Callable[[], None]]:
        srv = start(databases[backend], tmp_path_factory.mktemp(f"{name}-{backend}"), **settings)
        return srv, srv.stop

    cache = PerBackend(make)
    try:
        yield cache
    finally:
        cache.close()


@pytest.fixture(scope="session")
def servers(databases, tmp_path_factory) -> Iterator[PerBackend]:
    """The default-settings server of each backend's session database."""
    yield from servers_of(databases, tmp_path_factory, "server")


@pytest.fixture(scope="session")
def server(database, servers) -> Server:
    """The default-settings server of the session's database."""
    return servers[database.backend]


def servers_on(db: TestDatabase, directory: Path, start: Start = start_server) -> Iterator[Start]:
    """For a test fixture: start servers with other settings on `db`, stopped after the test."""
    started: list[AnyServer] = []

    def start_one(**settings: str) -> AnyServer:
        srv = start(db, directory, **settings)
        started.append(srv)
        return srv

    try:
        yield start_one
    finally:
        for srv in started:
            srv.stop()


@pytest.fixture
def server_factory(database, clean, tmp_path) -> Iterator[Start]:
    """Start extra servers with other settings on the session's database, emptied first; stopped after the test."""
    yield from servers_on(database, tmp_path)


QUIET_SETTINGS = ("MATCHING__", "PRIORITY__POLICY", "JOBS__CLOCK_SKEW_SECONDS")  # what a quiet server may set


@pytest.fixture(scope="module")
def quiet_servers() -> Iterator[dict[tuple, Server]]:
    """The servers `quiet_server` started, by backend and settings; stopped after the module
    (its tests of one backend run together: an idle server still polls the database)."""
    started: dict[tuple, Server] = {}
    try:
        yield started
    finally:
        for srv in started.values():
            srv.stop()


@pytest.fixture
def quiet_server(database, quiet_servers, clean, tmp_path_factory) -> Start:
    """The module's server of this backend with these settings, started when first asked for
    (real uvicorn; see `quiet_server_of`)."""
    return quiet_server_of(database, quiet_servers, tmp_path_factory, start_server)


def quiet_server_of(database: TestDatabase, quiet_servers: dict, tmp_path_factory, start: Start) -> Start:
    """The module's server of this backend with these settings, started when first asked for.

    Only settings that change what a request does (`matching.*`, `priority.policy`,
    `jobs.clock_skew_seconds`), and
    the server's priority loop runs once, a second after its start (waited for here when
    the policy is not the default's), and not again within the hour: it writes nothing the
    other tests on the database could see, so every test asking for the same settings can
    share it."""

    def get(**settings: str) -> AnyServer:
        others = [name for name in settings if not name.upper().startswith(QUIET_SETTINGS)]
        assert not others, f"settings a shared server must not have, use server_factory: {others}"
        key = (database.backend, tuple(sorted(settings.items())))
        if key not in quiet_servers:
            directory = tmp_path_factory.mktemp(f"quiet-{database.backend}")
            quiet_servers[key] = start(database, directory, PRIORITY__INTERVAL_SECONDS="3600", **settings)
            if "PRIORITY__POLICY" in settings:  # its first run, a second after start, is behind it
                time.sleep(1.5)
        return quiet_servers[key]

    return get


@pytest.fixture
def private_database(database, tmp_path) -> Iterator[TestDatabase]:
    """A migrated database of this test's backend that no session server uses, removed after the
    test: for settings the session servers' background loops would contradict (their lease sweep,
    for one, applies their own jobs.max_reschedules to any lapsed lease in the database)."""
    db, remove = migrated_database(database.backend, tmp_path)
    try:
        yield db
    finally:
        remove()


@pytest.fixture
def private_server_factory(private_database, tmp_path) -> Iterator[Start]:
    """Start servers on `private_database`; stopped after the test, before it is removed."""
    yield from servers_on(private_database, tmp_path)


# one pooled engine per database for the per-test cleanup: a new connection each test
# costs PostgreSQL more than the cleanup itself
_CLEANUP_ENGINES: dict[str, sa.Engine] = {}


def clear_tables(db: TestDatabase, attempts: int = 5) -> None:
    """Empty every table, children first. DELETE, not TRUNCATE: a test leaves a few rows,
    which PostgreSQL deletes in ~3 ms where truncating the whole schema takes ~50 ms. Ids go
    on counting (fairmatch never gives an id twice, on either backend). The servers'
    background work may hold row locks in another order: a deadlock PostgreSQL breaks by
    aborting one side, so the cleanup tries again.

    On PostgreSQL the cleanup holds the priority loop's lock: a run that read the previous
    test's jobs commits before the rows go (and goes with them), and none starts meanwhile;
    SQLite's write lock does the same there."""
    engine = _CLEANUP_ENGINES.get(db.sync_url)
    if engine is None:
        engine = _CLEANUP_ENGINES[db.sync_url] = sa.create_engine(db.sync_url, pool_size=1)
    for attempt in range(attempts):
        try:
            with engine.begin() as conn:
                if db.backend == "postgresql":
                    conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": PRIORITY_LOCK})
                for table in reversed(metadata.sorted_tables):
                    conn.execute(table.delete())
            return
        except sa.exc.OperationalError:
            if attempt == attempts - 1:
                raise
            time.sleep(0.2)


def shares_module_fixtures(item: pytest.Item) -> bool:
    """Whether the test uses a fixture made once per module or class (a server, a pgbouncer)."""
    definitions = item._fixtureinfo.name2fixturedefs  # type: ignore[attr-defined]
    return any(defs[-1].scope in ("module", "class", "package") for defs in definitions.values())


def pytest_collection_modifyitems(items):
    """Groups for `--dist loadgroup`: the tests sharing a module's servers or other module-scoped
    fixtures run on one worker, per backend (an idle server still polls the database, so they
    run together); every other test is spread one by one, which keeps both workers busy to
    the end."""
    for item in items:
        if not shares_module_fixtures(item):
            continue
        params = getattr(item, "callspec", None)
        backend = params.params.get("database", "") if params is not None else ""
        item.add_marker(pytest.mark.xdist_group(f"{item.module.__name__}:{backend}"))
    # the longest modules first: started last, one of them would leave the other worker idle at the end
    items.sort(
        key=lambda item: (
            LONGEST_FIRST.index(item.module.__name__) if item.module.__name__ in LONGEST_FIRST else len(LONGEST_FIRST)
        )
    )


# the modules whose tests wait longest (a restarted PostgreSQL, several servers, priority intervals)
LONGEST_FIRST = (
    "tests.fault.test_pg_faults",
    "tests.e2e.test_two_replicas",
    "tests.db.test_fair_share",
    "tests.e2e.test_schemathesis",
    "tests.e2e.test_usage_lag",
    "tests.e2e.test_pgbouncer",
    "tests.e2e.test_priority_loop",
)


@pytest.fixture
def clean(database) -> TestDatabase:
    """Per-test isolation: every table emptied before the test."""
    clear_tables(database)
    return database


@pytest.fixture
def client(server, clean) -> Iterator[httpx.Client]:
    with server.client() as c:
        yield c


TOKEN_SECRET = "end-to-end test secret, long enough for HS256"
TOKEN_SETTINGS = AuthSettings(mode="token", secret=TOKEN_SECRET)  # what `token_server` checks


@pytest.fixture
def as_role(token_server, clean) -> Iterator[Callable[..., httpx.Client]]:
    """A client of `token_server` acting with a freshly minted token of `role`."""
    clients: list[httpx.Client] = []

    def make(role: str, sub: str = "someone", **claims: Any) -> httpx.Client:
        bearer = create_token(TOKEN_SETTINGS, role=Role(role), sub=sub, ttl_seconds=600, **claims)
        c = token_server.client(headers={"Authorization": f"Bearer {bearer}"})
        clients.append(c)
        return c

    yield make
    for c in clients:
        c.close()
