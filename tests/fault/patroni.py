"""A Patroni cluster of the test's own: one etcd and two PostgreSQL nodes on loopback.

Debian's `patroni` and `etcd-server` are installed with apt-get when missing
(tests/debian_tools.py: a failed install fails the test). etcd runs as the
test's user; Patroni, and so PostgreSQL, as `postgres` when the test runs as
root (PostgreSQL refuses root), in a temporary directory it owns. Every port
is a free loopback port. `synchronous_mode` is on, so a commit is
acknowledged only once the synchronous standby has it, and
`primary_start_timeout: 0` makes a crashed primary fail over to that standby
instead of restarting in place. `destroy()` stops everything and removes
every file, whatever state the cluster is in.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.conftest import free_port
from tests.debian_tools import debian_tool
from tests.fault.cluster import SYSTEM_USER, find_bindir

SCOPE = "fairmatch"
# Patroni's loop runs every second; a leader that stops renewing its key loses it after TTL
TTL_SECONDS, LOOP_WAIT_SECONDS, RETRY_TIMEOUT_SECONDS = 20, 1, 5
SERVER_PARAMETERS = {
    "shared_buffers": "16MB",
    "max_connections": 100,
    "fsync": "on",  # what a failover must keep is what was flushed
    "synchronous_commit": "on",
    "wal_log_hints": "on",  # pg_rewind, when the old primary comes back as a standby
}


def _wait(what: str, ready, seconds: float, log=lambda: "") -> None:
    """Poll `ready()` every 0.1 s until it is true; fail naming `what` after `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.1)
    raise AssertionError(f"{what} not within {seconds} s\n{log()}")


@dataclass
class Node:
    name: str
    directory: Path
    port: int = field(default_factory=free_port)  # PostgreSQL
    api_port: int = field(default_factory=free_port)  # Patroni's REST API
    process: subprocess.Popen | None = None

    @property
    def data(self) -> Path:
        return self.directory / "data"

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def log_path(self) -> Path:
        return self.directory / "patroni.log"

    def log(self) -> str:
        logs = [self.log_path, *sorted((self.data / "log").glob("*"))] if self.data.exists() else [self.log_path]
        return "\n".join(p.read_text(errors="replace")[-6000:] for p in logs if p.is_file())

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None


class PatroniCluster:
    def __init__(self, nodes: int = 2) -> None:
        self.bindir = find_bindir()
        self.patroni = debian_tool("patroni")
        self.etcd = debian_tool("etcd", "etcd-server")
        self.base = Path(tempfile.mkdtemp(prefix="fairmatch-patroni-"))
        self.etcd_port, self.etcd_peer_port = free_port(), free_port()
        self.etcd_process: subprocess.Popen | None = None
        self.nodes = [Node(f"node{i + 1}", self.base / f"node{i + 1}") for i in range(nodes)]
        self.account = pwd.getpwnam(SYSTEM_USER) if os.geteuid() == 0 else None
        if self.account is not None:  # the nodes' directories are inside: postgres must be able to enter it
            os.chown(self.base, self.account.pw_uid, self.account.pw_gid)

    # --- start ---------------------------------------------------------------------------

    def start(self) -> PatroniCluster:
        """etcd, then the nodes; returns once there is a leader and a streaming synchronous standby."""
        self._start_etcd()
        for node in self.nodes:
            self._start_node(node)
        _wait("a leader and a synchronous standby", lambda: self._alive() and self.leader() and self.sync_standby(),
              120, self.logs)  # fmt: skip
        return self

    def _start_etcd(self) -> None:
        data = self.base / "etcd"
        client, peer = f"http://127.0.0.1:{self.etcd_port}", f"http://127.0.0.1:{self.etcd_peer_port}"
        with (self.base / "etcd.log").open("wb") as log:
            self.etcd_process = subprocess.Popen(
                [self.etcd, "--name", "etcd", "--data-dir", str(data),
                 "--listen-client-urls", client, "--advertise-client-urls", client,
                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", f"etcd={peer}", "--initial-cluster-state", "new"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        _wait("etcd healthy", lambda: _get_json(f"{client}/health").get("health") == "true", 30,
              lambda: (self.base / "etcd.log").read_text(errors="replace")[-3000:])  # fmt: skip

    def _start_node(self, node: Node) -> None:
        node.directory.mkdir()
        config = node.directory / "patroni.yml"
        config.write_text(json.dumps(self._config(node), indent=2))  # JSON is YAML
        run_as: dict = {}
        if self.account is not None:
            for path in (node.directory, config):
                os.chown(path, self.account.pw_uid, self.account.pw_gid)
            run_as = {"user": self.account.pw_uid, "group": self.account.pw_gid, "extra_groups": []}
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(node.directory), "LANG": "C.UTF-8"}
        node.directory.chmod(0o700)
        with node.log_path.open("wb") as log:
            node.process = subprocess.Popen([self.patroni, str(config)], stdout=log, stderr=subprocess.STDOUT,
                                            cwd=node.directory, env=env, start_new_session=True, **run_as)  # fmt: skip

    def _config(self, node: Node) -> dict:
        return {
            "scope": SCOPE,
            "name": node.name,
            "log": {"level": "INFO"},
            "restapi": {"listen": f"127.0.0.1:{node.api_port}", "connect_address": f"127.0.0.1:{node.api_port}"},
            "etcd3": {"hosts": [f"127.0.0.1:{self.etcd_port}"]},
            "bootstrap": {
                "dcs": {
                    "ttl": TTL_SECONDS,
                    "loop_wait": LOOP_WAIT_SECONDS,
                    "retry_timeout": RETRY_TIMEOUT_SECONDS,
                    "synchronous_mode": True,
                    "primary_start_timeout": 0,  # a crashed primary fails over, it is not restarted in place
                    "postgresql": {"use_pg_rewind": True, "parameters": SERVER_PARAMETERS},
                },
                "initdb": [{"encoding": "UTF8"}, {"auth": "trust"}],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{node.port}",
                "connect_address": f"127.0.0.1:{node.port}",
                "data_dir": str(node.data),
                "bin_dir": str(self.bindir),
                "pgpass": str(node.directory / "pgpass"),
                "authentication": {
                    "superuser": {"username": "postgres"},
                    "replication": {"username": "postgres"},
                    "rewind": {"username": "postgres"},
                },
                "parameters": {"unix_socket_directories": str(node.directory)},
                "pg_hba": [
                    "local all all trust",
                    "host all all 127.0.0.1/32 trust",
                    "host replication all 127.0.0.1/32 trust",
                ],
            },
            "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False},
        }

    def _alive(self) -> bool:
        exited = [n.name for n in self.nodes if n.process is not None and n.process.poll() is not None]
        assert not exited, f"Patroni exited on {exited}:\n{self.logs()}"
        return True

    # --- what Patroni says ---------------------------------------------------------------

    def members(self) -> list[dict]:
        """GET /cluster of the first node that answers: name, role, state, host, port, lag…"""
        for node in self.nodes:
            members = _get_json(f"{node.api}/cluster").get("members")
            if members is not None:
                return members
        return []

    def _member(self, role: str) -> Node | None:
        for member in self.members():
            if member.get("role") == role and member.get("state") in ("running", "streaming"):
                return next(n for n in self.nodes if n.name == member["name"])
        return None

    def leader(self) -> Node | None:
        return self._member("leader")

    def sync_standby(self) -> Node | None:
        """The synchronous standby, once it streams from the leader."""
        return self._member("sync_standby")

    def url(self, dbname: str = "postgres", node: Node | None = None) -> str:
        """One node's URL (the leader's by default)."""
        node = node or self.leader()
        assert node is not None, "no leader"
        return f"postgresql://postgres@127.0.0.1:{node.port}/{dbname}"

    def multi_host_url(self, dbname: str) -> str:
        """Every node, in SQLAlchemy's form: the first that accepts writes serves."""
        hosts = "&".join(f"host=127.0.0.1:{n.port}" for n in self.nodes)
        return f"postgresql://postgres@/{dbname}?{hosts}&target_session_attrs=read-write"

    def conninfo_url(self, dbname: str) -> str:
        """Every node, in libpq's (and psycopg's) own URI form."""
        hosts = ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)
        return f"postgresql://postgres@{hosts}/{dbname}?target_session_attrs=read-write"

    def logs(self) -> str:
        return "\n".join(f"--- {n.name}\n{n.log()}" for n in self.nodes)

    # --- tear down -----------------------------------------------------------------------

    def destroy(self) -> None:
        """Stop Patroni (it stops its PostgreSQL), then etcd; kill what lingers; remove every file."""
        for node in self.nodes:
            if node.process is not None and node.process.poll() is None:
                node.process.send_signal(signal.SIGTERM)
        for node in self.nodes:
            if node.process is not None:
                _stop(node.process, 30)
            pid = node.postmaster_pid()
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):  # its children exit when they notice it gone
                    os.kill(pid, signal.SIGKILL)
        if self.etcd_process is not None:
            self.etcd_process.send_signal(signal.SIGTERM)
            _stop(self.etcd_process, 10)
        shutil.rmtree(self.base, ignore_errors=True)


def _stop(process: subprocess.Popen, seconds: float) -> None:
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the process group: Patroni and anything it started
        process.wait()


def _get_json(url: str) -> dict:
    try:
        return httpx.get(url, timeout=2).json()
    except (httpx.HTTPError, ValueError):
        return {}
