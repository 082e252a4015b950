"""The deployment for real, without Docker.

- The dashboard only names metrics a live server exports (both backends).
- The compose topology as plain processes on PostgreSQL: a fresh database
  that `serve` refuses, the one-off `fairmatch db upgrade`, then two
  `fairmatch serve --workers 2` replicas drained by concurrent pilots that
  alternate between them; every job is handed out once and each replica's
  /metrics counts exactly the matches it served, whichever worker answers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import httpx
import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import (
    BACKENDS,
    REPO,
    create_pg_database,
    drop_pg_database,
    free_port,
    pg_url,
    wait_until_ready,
)
from tests.test_deploy_files import CONTRACT, dashboard_metric_names, sample_names

FAIRMATCH = Path(sys.executable).with_name("fairmatch")  # the venv's console script
PILOT = {"Site": "LCG.CERN.cern", "CPUTime": 10**7}
JOBS = 60
PILOTS = 6
SCRAPES = 6  # enough for both workers of a replica to answer some


def scrape(url: str) -> list:
    r = httpx.get(f"{url}/metrics", timeout=10)
    assert r.status_code == 200, r.text
    return list(text_string_to_metric_families(r.text))


def exported_names(families: list) -> set[str]:
    """Sample names, plus those a declared family will show once it has a value
    (a labelled counter has no sample before its first increment)."""
    names = {s.name for f in families for s in f.samples}
    return names | set().union(*(sample_names(f.name, f.type) for f in families))


def samples(families: list, name: str, **labels: str) -> list:
    return [
        s for f in families for s in f.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]  # fmt: skip


def submit(client: httpx.Client, specs: list[dict]) -> list[int]:
    r = client.post("/api/v1/jobs", json={"jobs": specs})
    assert r.status_code == 201, r.text
    return [j["job_id"] for j in r.json()["jobs"]]


# --- the dashboard against a live server ------------------------------------------


def test_the_dashboard_names_only_exported_metrics(clean, server_factory):
    # corrections on, so that fairmatch_share_correction has values to show
    server = server_factory(
        PRIORITY__CORRECTIONS_ENABLED="true",
        PRIORITY__CORRECTIONS_FILE=str(REPO / "config/share-corrections.cfg"),
    )
    with httpx.Client(base_url=server.url, timeout=30) as client:
        submit(client, [
            {"owner": owner, "owner_group": group, "cpu_time": 3600}
            for owner, group in [("alice", "lhcb_user"), ("bob", "lhcb_user"), ("carol", "lhcb_mc")] * 2
        ])  # fmt: skip
        r = client.post("/api/v1/match", json={**PILOT, "request_id": "dashboard-1"})
        assert r.status_code == 200, r.text
        assert client.post("/api/v1/priorities/recompute").status_code == 200
    families = scrape(server.url)
    exported = exported_names(families)

    assert dashboard_metric_names() <= exported, sorted(dashboard_metric_names() - exported)
    for family, kind in CONTRACT.items():
        assert sample_names(family, kind) <= exported, family
    assert samples(families, "fairmatch_match_requests_total", result="matched")
    assert samples(families, "fairmatch_share_correction")
    groups = {s.labels["owner_group"] for s in samples(families, "fairmatch_group_jobs", status="Waiting")}
    assert groups == {"lhcb_user", "lhcb_mc"}


# --- two replicas on PostgreSQL ---------------------------------------------------------


@pytest.fixture
def fresh_pg() -> str:
    if "postgresql" not in BACKENDS:
        pytest.skip("replicas share a PostgreSQL database; FAIRMATCH_TEST_BACKENDS leaves it out")
    name = create_pg_database()
    yield pg_url(name)
    drop_pg_database(name)


class Replicas:
    """`fairmatch` commands and `fairmatch serve` processes on one database."""

    def __init__(self, directory: Path, database_url: str) -> None:
        self.directory = directory
        config = directory / "empty.toml"
        config.write_text("# settings come from the environment\n")
        inherited = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
        self.env = {**inherited, "FAIRMATCH_CONFIG": str(config), "FAIRMATCH_DATABASE_URL": database_url}
        self.processes: list[subprocess.Popen] = []

    def run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([FAIRMATCH, *args], env=self.env, cwd=self.directory,
                              capture_output=True, text=True, timeout=120)  # fmt: skip

    def serve(self, port: int) -> str:
        # each replica its own metrics directory (the workers of one share it)
        env = {**self.env, "FAIRMATCH_SERVER__METRICS_DIR": str(self.directory / f"metrics-{port}")}
        log = (self.directory / f"serve-{port}.log").open("wb")
        process = subprocess.Popen([FAIRMATCH, "serve", "--port", str(port), "--workers", "2"], env=env,
                                   cwd=self.directory, stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
        self.processes.append(process)
        url = f"http://127.0.0.1:{port}"
        if not wait_until_ready(url, process, seconds=60):
            pytest.fail(f"replica on {port} not ready:\n{self.log(port)}", pytrace=False)
        return url

    def log(self, port: int) -> str:
        return (self.directory / f"serve-{port}.log").read_text(errors="replace")

    def stop(self) -> list[int | None]:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        codes = []
        for process in self.processes:
            try:
                codes.append(process.wait(timeout=30))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                codes.append(None)
        return codes


@pytest.fixture
def replicas(fresh_pg, tmp_path):
    group = Replicas(tmp_path, fresh_pg)
    yield group
    group.stop()


def drain(urls: list[str], pilot: int, results: list, lock: threading.Lock) -> None:
    """Ask the replicas in turn until one answers 204 (bounded: never more asks than jobs)."""
    with httpx.Client(timeout=30) as client:
        for ask in range(JOBS + 2):
            url = urls[(pilot + ask) % len(urls)]
            body = {**PILOT, "PilotReference": f"pilot-{pilot}", "request_id": f"pilot-{pilot}-{ask}"}
            r = client.post(f"{url}/api/v1/match", json=body)
            with lock:
                results.append((url, r.status_code, r.json()["job_id"] if r.status_code == 200 else None))
            if r.status_code != 200:
                return


def test_two_replicas_after_a_one_off_migration(replicas):
    ports = [free_port(), free_port()]

    refused = replicas.run("serve", "--port", str(ports[0]))
    assert refused.returncode != 0
    assert "fairmatch db upgrade" in refused.stderr + refused.stdout
    migrated = replicas.run("db", "upgrade")
    assert migrated.returncode == 0, migrated.stderr

    urls = [replicas.serve(port) for port in ports]
    with httpx.Client(base_url=urls[0], timeout=30) as client:
        submitted = submit(client, [
            {"owner": f"user{i % 3}", "owner_group": f"group{i % 2}", "cpu_time": 3600} for i in range(JOBS)
        ])  # fmt: skip

    results: list[tuple[str, int, int | None]] = []
    lock = threading.Lock()
    pilots = [threading.Thread(target=drain, args=(urls, p, results, lock)) for p in range(PILOTS)]
    for t in pilots:
        t.start()
    for t in pilots:
        t.join(timeout=120)
    # a pilot may give up (204) while a claim it lost left jobs behind: sweep once more
    drain(urls, PILOTS, results, lock)

    assert {status for _, status, _ in results} <= {200, 204}, Counter(s for _, s, _ in results)
    handed = Counter(job for _, status, job in results if status == 200)
    assert max(handed.values()) == 1, [j for j, n in handed.items() if n > 1]
    assert set(handed) == set(submitted)
    served = Counter(url for url, status, _ in results if status == 200)
    assert all(served[url] > 0 for url in urls), served

    with psycopg.connect(replicas.env["FAIRMATCH_DATABASE_URL"]) as conn:
        statuses = dict(conn.execute("SELECT status, count(*) FROM jobs GROUP BY status").fetchall())
    assert statuses == {"Matched": JOBS}

    matched_total = 0.0
    for url in urls:
        counted = set()
        for _ in range(SCRAPES):
            families = scrape(url)
            counted.add(sum(s.value for s in samples(families, "fairmatch_match_requests_total", result="matched")))
            server_errors = [s for s in samples(families, "fairmatch_http_requests_total")
                             if s.labels["status"].startswith("5")]  # fmt: skip
            assert not server_errors
        assert counted == {served[url]}, f"{url}: scrapes counted {counted}, it served {served[url]}"
        matched_total += counted.pop()
    assert matched_total == JOBS

    assert replicas.stop() == [0, 0], [replicas.log(p) for p in ports]
