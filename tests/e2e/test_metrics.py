"""/metrics of a real `fairmatch serve --workers 2`: the counters sum over both workers,
the database gauges follow submissions and matches, logs are JSON lines with request ids."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import REPO, free_port, wait_until_ready

FAIRMATCH = str(Path(sys.executable).with_name("fairmatch"))
MAX_TRIES_FOR_BOTH_WORKERS = 2000


@dataclass
class Served:
    url: str
    process: subprocess.Popen
    log_path: Path

    def log_entries(self) -> list[dict]:
        entries = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                entries.append(json.loads(line))
        return entries


@pytest.fixture
def served(database, clean, tmp_path) -> Iterator[Served]:
    port = free_port()
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    (metrics_dir / "counter_99999.db").write_bytes(b"stale values of an earlier run")
    (tmp_path / "empty.toml").write_text("")
    env = {
        **os.environ,
        "FAIRMATCH_CONFIG": str(tmp_path / "empty.toml"),
        "FAIRMATCH_DATABASE_URL": database.url,
        "FAIRMATCH_SERVER__METRICS_DIR": str(metrics_dir),
        "FAIRMATCH_SERVER__METRICS_CACHE_SECONDS": "0",
        "FAIRMATCH_SERVER__LOG_LEVEL": "debug",
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    log_path = tmp_path / "serve.log"
    process = subprocess.Popen(
        [FAIRMATCH, "serve", "--workers", "2", "--port", str(port)],
        cwd=REPO, env=env, stdout=log_path.open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    if not wait_until_ready(url, process, seconds=60):
        process.kill()
        pytest.fail(f"fairmatch serve not ready:\n{log_path.read_text()}", pytrace=False)
    yield Served(url, process, log_path)
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    """Every sample of one scrape (on a new connection, so any worker may answer)."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def sample(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def access_pids(served: Served, path: str) -> set[int]:
    return {e["pid"] for e in served.log_entries() if e.get("logger") == "fairmatch.access" and e.get("path") == path}


def test_counters_sum_over_two_workers_and_gauges_follow_the_database(served):
    # new connections until both workers have answered, counting the calls
    healthz_calls = 0
    while len(access_pids(served, "/healthz")) < 2:
        assert healthz_calls < MAX_TRIES_FOR_BOTH_WORKERS, "one worker answered every request"
        assert httpx.get(f"{served.url}/healthz").status_code == 200
        healthz_calls += 1
    api = f"{served.url}/api/v1"
    jobs = [{"owner": "alice", "owner_group": "lhcb_mc"}] * 6 + [{"owner": "bob", "owner_group": "lhcb_user"}] * 3
    assert httpx.post(f"{api}/jobs", json={"jobs": jobs}).status_code == 201
    pilot = {"Site": "LCG.A.ch", "CPUTime": 10**7}
    answers = [httpx.post(f"{api}/match", json={**pilot, "OwnerGroup": "lhcb_mc"}).status_code for _ in range(8)]
    assert answers == [200] * 6 + [204] * 2
    replay = {**pilot, "request_id": "again"}
    assert httpx.post(f"{api}/match", json=replay).status_code == 200
    assert httpx.post(f"{api}/match", json=replay).status_code == 200

    scrapes = [scrape(served.url) for _ in range(6)]
    for s in scrapes:
        assert sample(s, "fairmatch_http_requests_total", method="GET", route="/healthz", status="200") == healthz_calls
        assert sample(s, "fairmatch_match_requests_total", result="matched") == 7
        assert sample(s, "fairmatch_match_requests_total", result="no_match") == 2
        assert sample(s, "fairmatch_match_requests_total", result="replayed") == 1
        assert sample(s, "fairmatch_match_duration_seconds_count") == 10
        assert sample(s, "fairmatch_submitted_jobs_total") == 9
        assert sample(s, "fairmatch_http_requests_total", method="POST", route="/api/v1/match", status="204") == 2
        assert sample(s, "fairmatch_group_jobs", owner_group="lhcb_user", status="Waiting") == 2
        assert sample(s, "fairmatch_group_jobs", owner_group="lhcb_mc", status="Waiting") == 0
        assert sample(s, "fairmatch_group_jobs", owner_group="lhcb_mc", status="Matched") == 6
        assert sample(s, "fairmatch_group_jobs", owner_group="lhcb_user", status="Matched") == 1
        assert sample(s, "fairmatch_jobs", status="Matched") == 7
        assert sample(s, "fairmatch_jobs", status="Waiting") == 2
        assert sample(s, "fairmatch_task_queues") == 2  # the emptied lhcb_mc queue waits for the sweep
        assert sample(s, "fairmatch_group_target_share", owner_group="lhcb_mc") == 0.5
        assert sample(s, "fairmatch_database_up") == 1
    assert len(access_pids(served, "/metrics") | access_pids(served, "/healthz")) == 2


def group_jobs(samples: dict, group: str) -> dict[str, float]:
    """The group's fairmatch_group_jobs series by status: present ones only, zeros included."""
    return {
        dict(labels)["status"]: value
        for (name, labels), value in samples.items()
        if name == "fairmatch_group_jobs" and dict(labels)["owner_group"] == group
    }


def test_matched_and_running_jobs_are_counted_apart_through_a_lifecycle(served):
    api = f"{served.url}/api/v1"
    job = {"owner": "alice", "owner_group": "lhcb_mc"}
    assert httpx.post(f"{api}/jobs", json={"jobs": [job, job]}).status_code == 201
    assert group_jobs(scrape(served.url), "lhcb_mc") == {"Waiting": 2, "Matched": 0, "Running": 0}

    matched = httpx.post(f"{api}/match", json={"Site": "LCG.A.ch", "CPUTime": 10**7})
    assert matched.status_code == 200
    s = scrape(served.url)
    assert group_jobs(s, "lhcb_mc") == {"Waiting": 1, "Matched": 1, "Running": 0}
    assert sample(s, "fairmatch_jobs", status="Matched") == 1 and ("fairmatch_jobs", (("status", "Running"),)) not in s

    started = httpx.post(f"{api}/jobs/{matched.json()['job_id']}/status", json={"status": "Running"})
    assert started.status_code == 200, started.text
    s = scrape(served.url)
    assert group_jobs(s, "lhcb_mc") == {"Waiting": 1, "Matched": 0, "Running": 1}
    assert sample(s, "fairmatch_jobs", status="Running") == 1 and sample(s, "fairmatch_jobs", status="Matched") == 0


def test_recompute_is_timed_and_logs_are_json_with_request_ids(served):
    api = f"{served.url}/api/v1"
    assert httpx.post(f"{api}/jobs", json={"jobs": [{"owner": "a", "owner_group": "g"}]}).status_code == 201
    assert httpx.post(f"{api}/priorities/recompute").status_code == 200
    assert sample(scrape(served.url), "fairmatch_priority_recompute_seconds_count") >= 1
    r = httpx.post(f"{api}/match", json={"Site": "S", "CPUTime": 10**7}, headers={"X-Request-ID": "pilot-7.req-1"})
    assert r.status_code == 200 and r.headers["x-request-id"] == "pilot-7.req-1"
    assert len(httpx.get(f"{served.url}/healthz").headers["x-request-id"]) == 32  # one made up
    entries = [e for e in served.log_entries() if e.get("request_id") == "pilot-7.req-1"]
    decision = [e for e in entries if e["message"] == "match decision"]
    assert decision and decision[0]["job_id"] == r.json()["job_id"] and decision[0]["site"] == "S"
    access = [e for e in entries if e["logger"] == "fairmatch.access"]
    assert access and access[0]["route"] == "/api/v1/match" and access[0]["status"] == 200
    assert all({"ts", "level", "logger", "message", "pid"} <= set(e) for e in served.log_entries())
