"""A throwaway PostgreSQL cluster that a test owns: its own data directory,
loopback port and socket directory, so that stopping and restarting it
touches nothing else on the machine.

initdb refuses to run as root, so as root every server command runs as the
`postgres` system user, in a temporary directory handed over to it.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import psycopg

PG_BIN_GLOB = "/usr/lib/postgresql/*/bin"
SYSTEM_USER = "postgres"
SERVER_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "shared_buffers": "'16MB'",
    "max_connections": "100",
    "fsync": "on",  # durability is what the fault tests are about
    "synchronous_commit": "on",
    "full_page_writes": "on",
}


class ClusterUnavailable(RuntimeError):
    """What a cluster needs is missing on this machine (the reason is the message)."""


def find_bindir() -> Path:
    """The newest /usr/lib/postgresql/<version>/bin that has initdb and pg_ctl."""
    found = [Path(d) for d in glob.glob(PG_BIN_GLOB) if (Path(d) / "initdb").is_file()]
    if not found:
        raise ClusterUnavailable(f"no PostgreSQL server binaries in {PG_BIN_GLOB}")

    def version(bindir: Path) -> tuple[int, ...]:
        return tuple(int(p) for p in bindir.parent.name.split(".") if p.isdigit())

    return max(found, key=version)


def _as_server_user() -> list[str]:
    """The command prefix that runs server binaries as a non-root user."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        raise ClusterUnavailable(f"running as root and there is no {SYSTEM_USER!r} user for initdb") from None
    runuser = shutil.which("runuser")
    if runuser is None:
        raise ClusterUnavailable("running as root and `runuser` is missing")
    return [runuser, "-u", SYSTEM_USER, "--"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgCluster:
    """initdb'ed on construction; start/stop/restart/destroy as the test needs."""

    def __init__(self) -> None:
        self.bindir = find_bindir()
        self.prefix = _as_server_user()
        self.port = _free_port()
        self.base = Path(tempfile.mkdtemp(prefix="fairmatch-pg-"))
        self.data = self.base / "data"
        self.logfile = self.base / "server.log"
        try:
            self._hand_over(self.base)
            self._initdb()
        except BaseException:
            self.destroy()
            raise

    # --- set-up ------------------------------------------------------------------------

    def _hand_over(self, path: Path) -> None:
        if self.prefix:
            entry = pwd.getpwnam(SYSTEM_USER)
            os.chown(path, entry.pw_uid, entry.pw_gid)
        path.chmod(0o700)

    def _initdb(self) -> None:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust",
                  "--encoding=UTF8", "--no-instructions")  # fmt: skip
        settings = {**SERVER_SETTINGS, "port": str(self.port), "unix_socket_directories": f"'{self.base}'"}
        # appending keeps the file's owner, so root may write it directly
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.writelines(f"{key} = {value}\n" for key, value in settings.items())

    def _run(self, name: str, *args: str) -> str:
        # cwd: a directory the server user may enter, whatever the caller's is
        result = subprocess.run(
            [*self.prefix, str(self.bindir / name), *args],
            cwd=self.base, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        if result.returncode != 0:
            command = " ".join([name, *args])
            raise RuntimeError(f"{command} failed ({result.returncode}):\n{result.stderr}{result.stdout}")
        return result.stdout

    def _pg_ctl(self, *args: str) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.logfile), "-w", "-t", "60", *args)

    # --- life cycle ----------------------------------------------------------------------

    def start(self) -> None:
        self._pg_ctl("start")

    def stop(self, mode: str = "fast") -> None:
        self._pg_ctl("stop", "-m", mode)

    def restart(self) -> None:
        """Fast restart: every session is terminated, in-flight transactions roll back."""
        self._pg_ctl("restart", "-m", "fast")

    def is_running(self) -> bool:
        return self.postmaster_pid() is not None

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])
        except (FileNotFoundError, ValueError):
            return None

    def destroy(self) -> None:
        """Stop the server if it runs and remove every file of the cluster."""
        if self.data.exists() and self.is_running():
            try:
                self._pg_ctl("stop", "-m", "immediate")
            except (RuntimeError, subprocess.TimeoutExpired):
                pid = self.postmaster_pid()
                if pid is not None:
                    os.kill(pid, 9)
        shutil.rmtree(self.base, ignore_errors=True)

    # --- databases -----------------------------------------------------------------------

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def create_database(self, name: str) -> str:
        """Create the database and return its postgresql:// URL."""
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def log(self) -> str:
        try:
            return self.logfile.read_text(errors="replace")
        except OSError:
            return ""
