"""DIRAC 9's own classes, with the FairmatchDIRAC extension installed, against a real fairmatch service.

Runs inside integrations/dirac/.venv (ci/bootstrap.sh); `ci/run-tests.sh` is the way in.

- The fairmatch service is a subprocess of the project's own venv (`$FAIRMATCH_BIN/fairmatch
  serve`, default <repo>/.venv/bin) on a loopback port chosen here, auth off, on a database
  of its own: FAIRMATCH_DIRAC_BACKEND=postgresql (default: a new database on
  FAIRMATCH_TEST_PG_URL's server, dropped at the end) or sqlite (a file).
- DIRAC reads tests/dirac.cfg.in, filled in here and named by DIRACSYSCONFIG before any test
  module imports DIRAC: the port and the MariaDB settings (FAIRMATCH_DIRAC_MYSQL,
  FAIRMATCH_DIRAC_DB_PREFIX, see ci/mariadb.py) are known at import time, so the
  configuration is complete before anything reads it.
- FAIRMATCH_URL (and FAIRMATCH_TOKEN if given) are in the environment, which the
  extension reads before its configuration options.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parents[2]
# ci/mariadb.py, by path and under a name of its own: PyPI's MariaDB connector is `mariadb` too
_spec = importlib.util.spec_from_file_location("fairmatch_dirac_mariadb", TESTS.parent / "ci" / "mariadb.py")
assert _spec and _spec.loader
mariadb = sys.modules[_spec.name] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mariadb)

FAIRMATCH_BIN = Path(os.environ.get("FAIRMATCH_BIN", REPO / ".venv" / "bin"))
BACKEND = os.environ.get("FAIRMATCH_DIRAC_BACKEND", "postgresql")
PG_ADMIN_URL = os.environ.get("FAIRMATCH_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
UNFINISHED = ["Waiting", "Held", "Matched", "Running", "Stalled"]  # all but fairmatch.jobs.lifecycle.FINAL

if BACKEND not in ("postgresql", "sqlite"):
    raise pytest.UsageError(f"FAIRMATCH_DIRAC_BACKEND={BACKEND!r}: postgresql or sqlite")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


WORKDIR = Path(tempfile.mkdtemp(prefix="fairmatch-dirac-"))
PORT = free_port()  # chosen now so that the configuration below can name it
FAIRMATCH_URL = f"http://127.0.0.1:{PORT}"
MYSQL = mariadb.MySQL.from_env()
# DIRAC's ResourceStatus service, which the tests that need it start (test_dirac_classes.py)
RSS_PORT = free_port()


def _write_dirac_cfg() -> Path:
    values = {
        "MYSQL_HOST": MYSQL.host,
        "MYSQL_PORT": str(MYSQL.port),
        "MYSQL_USER": MYSQL.user,
        "MYSQL_PASSWORD": MYSQL.password,
        "DB_PREFIX": MYSQL.prefix,
        "RSS_PORT": str(RSS_PORT),
        "FAIRMATCH_URL": FAIRMATCH_URL,
        "FAIRMATCH_TOKEN": os.environ.get("FAIRMATCH_TOKEN", ""),
    }
    text = (TESTS / "dirac.cfg.in").read_text()
    for name, value in values.items():
        text = text.replace(f"@{name}@", value)
    cfg = WORKDIR / "dirac.cfg"
    cfg.write_text(text)
    return cfg


# before any test module imports DIRAC (collection comes after conftest's import)
DIRAC_CFG = _write_dirac_cfg()
os.environ["DIRACSYSCONFIG"] = str(DIRAC_CFG)
os.environ["FAIRMATCH_URL"] = FAIRMATCH_URL


def pytest_unconfigure(config) -> None:
    shutil.rmtree(WORKDIR, ignore_errors=True)


def _postgresql(statement: str) -> None:
    """A statement on PG_ADMIN_URL, run by the service's venv: it has psycopg, this venv need not."""
    code = "import psycopg, sys; psycopg.connect(sys.argv[1], autocommit=True).execute(sys.argv[2])"
    subprocess.run([str(FAIRMATCH_BIN / "python"), "-c", code, PG_ADMIN_URL, statement], check=True)


class FairmatchService:
    """`fairmatch serve` on PORT; `reset()` puts it on a new, empty database at the same URL."""

    def __init__(self) -> None:
        self.url = FAIRMATCH_URL
        self.api = f"{FAIRMATCH_URL}/api/v1"
        self.log_path = WORKDIR / "fairmatch.log"
        self.process: subprocess.Popen | None = None
        self.pg_name: str | None = None
        self.database_url: str | None = None
        config = WORKDIR / "fairmatch.toml"
        config.write_text("# settings come from the environment in these tests\n")
        # The service refuses FAIRMATCH_* variables that name no setting (fairmatch/settings_env.py),
        # and the ones of this suite (FAIRMATCH_DIRAC_*, FAIRMATCH_BIN) are not: none is passed on.
        self.base_env = {k: v for k, v in os.environ.items() if not k.startswith("FAIRMATCH_")}
        self.base_env |= {"FAIRMATCH_CONFIG": str(config), "FAIRMATCH_AUTH__MODE": "none"}

    def _new_database(self) -> str:
        if BACKEND == "sqlite":
            return f"sqlite+aiosqlite:///{WORKDIR / f'fairmatch-{uuid.uuid4().hex[:8]}.db'}"
        self.pg_name = f"fairmatch_dirac_{uuid.uuid4().hex[:12]}"
        _postgresql(f'CREATE DATABASE "{self.pg_name}"')
        url = f"{PG_ADMIN_URL.rsplit('/', 1)[0]}/{self.pg_name}".replace("postgresql://", "postgresql+psycopg://")
        # SQLite is migrated by `serve`; PostgreSQL must be, first
        subprocess.run(
            [str(FAIRMATCH_BIN / "fairmatch"), "db", "upgrade"],
            env=self.base_env | {"FAIRMATCH_DATABASE_URL": url},
            check=True,
            capture_output=True,
            cwd=WORKDIR,
        )
        return url

    def _drop_database(self) -> None:
        if self.pg_name:
            _postgresql(f'DROP DATABASE IF EXISTS "{self.pg_name}" WITH (FORCE)')
            self.pg_name = None

    def start(self) -> None:
        self.database_url = self._new_database()
        self._serve(self.database_url)

    def _serve(self, database_url: str) -> None:
        env = self.base_env | {"FAIRMATCH_DATABASE_URL": database_url}
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [str(FAIRMATCH_BIN / "fairmatch"), "serve", "--host", "127.0.0.1", "--port", str(PORT)],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=WORKDIR,  # not the repo: its config/fairmatch.toml is not this suite's
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                with urllib.request.urlopen(f"{self.url}/readyz", timeout=1) as reply:
                    if reply.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        self.stop()
        tail = self.log()[-5000:]
        pytest.fail(f"fairmatch not ready in 60 s (exit {self.process.returncode}):\n{tail}", pytrace=False)

    def stop(self) -> None:
        self.halt()
        self._drop_database()

    def halt(self) -> None:
        """Stop the service, keeping its database: `resume()` serves the same jobs again."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def resume(self) -> None:
        """Start the service again on the database `halt()` kept (same URL, same jobs)."""
        self._serve(self.database_url)

    def reset(self) -> None:
        self.stop()
        self.start()

    def kill_unfinished(self) -> None:
        """Kill every job that has not finished: they stay on record as Killed, their task queues empty."""
        self.request("POST", "/jobs/kill", {"filter": {"status": UNFINISHED}})

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def request(self, method: str, path: str, body: object = None) -> dict:
        """A call to the API (stdlib only: nothing beyond DIRAC's requirements is needed here)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.api}{path}", data=data, method=method)
        req.add_header("Content-Type", "application/json")
        if os.environ.get("FAIRMATCH_TOKEN"):
            req.add_header("Authorization", f"Bearer {os.environ['FAIRMATCH_TOKEN']}")
        with urllib.request.urlopen(req, timeout=30) as reply:
            raw = reply.read()
        return json.loads(raw) if raw else {}


@pytest.fixture(scope="session")
def fairmatch() -> Iterator[FairmatchService]:
    """The session's fairmatch service, at FAIRMATCH_URL."""
    service = FairmatchService()
    service.start()
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture
def fairmatch_clean(fairmatch: FairmatchService) -> FairmatchService:
    """The service with no unfinished job left by earlier tests (cheap; `fairmatch_fresh` forgets all)."""
    fairmatch.kill_unfinished()
    return fairmatch


@pytest.fixture
def fairmatch_fresh(fairmatch: FairmatchService) -> FairmatchService:
    """The service restarted on a new, empty database at the same URL (a few seconds)."""
    fairmatch.reset()
    return fairmatch


@pytest.fixture(scope="session")
def dirac() -> None:
    """DIRAC's global state from DIRAC_CFG, with no Configuration Server to sync with."""
    import DIRAC

    DIRAC.initialize(require_auth=False)


@pytest.fixture
def dirac_databases() -> mariadb.MySQL:
    """Empty JobDB, JobLoggingDB, PilotAgentsDB and (DIRAC's MySQL) TaskQueueDB, made again from
    DIRAC's .sql files (~0.2 s)."""
    return mariadb.recreate(MYSQL)
