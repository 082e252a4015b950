"""A database failover survived: Patroni promotes the synchronous standby, the service follows.

Two PostgreSQL nodes under Patroni (tests/fault/patroni.py, `synchronous_mode`
on) and one fairmatch server (real uvicorn) given both, in a multi-host URL
with `target_session_attrs=read-write`. 16 pilots drain 5 000 jobs: each
claims with a request id of its own, sends it again after a 503 or a failed
attempt (the same id: the service hands back the job that attempt may have
claimed), then reports Running and Done. A third of the way in, the
primary's postmaster is SIGKILLed; Patroni promotes the standby.

While no primary answers, every request must get a 503 with Retry-After,
never a 500, and never take longer than REQUEST_BOUND_SECONDS. The service
must match again, without a restart, within 30 s of the promotion, and its
background loops must run on the new primary: a priority run is recorded,
and a lease that lapses after the promotion is swept back to Waiting.

In the new primary's database, no job was handed out twice and none lost. A
job may legitimately go to two request ids only when the lease sweep gave it
back to Waiting in between, so the exact rule, per job: the pilots were given
it under k distinct request ids, its events show k Matched, and a lease
return to Waiting separates each Matched from the next.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx
import psycopg
import pytest

from fairmatch.db.engine import CONNECT_TIMEOUT_SECONDS, POOL_TIMEOUT_SECONDS
from tests.conftest import Server, TestDatabase, start_server
from tests.fault.patroni import Node, PatroniCluster

pytestmark = [pytest.mark.fault, pytest.mark.timeout(600)]  # the cluster, then the run's hard bound

FAIRMATCH = Path(sys.executable).with_name("fairmatch")  # the venv's console script
N_JOBS = 5000
N_PILOTS = 16
SUBMIT_BATCH = 1000
RESOURCE = {"Site": "S1", "CPUTime": 10**7}
KILL_AT = N_JOBS // 3  # matched jobs before the primary is killed
RECOVERY_SECONDS = 30  # from the promotion to the first successful match
LEASE_SECONDS = 30  # longer than any pilot's report is held up by the failover
# A request waits at most POOL_TIMEOUT_SECONDS for a connection; opening one tries each
# host for at most CONNECT_TIMEOUT_SECONDS; the statements on a live server take well under
# a second. Nothing may take longer, however the failover goes.
REQUEST_BOUND_SECONDS = POOL_TIMEOUT_SECONDS + 2 * CONNECT_TIMEOUT_SECONDS + 5
RUN_SECONDS = 360  # hard bound on the pilots' run: about 90 s alone, twice that beside the suite's other worker
LIVE_STATES = {"Waiting", "Matched", "Running", "Done"}


# --- set-up ----------------------------------------------------------------------------------


@pytest.fixture
def patroni() -> Iterator[PatroniCluster]:
    cluster = PatroniCluster()
    try:
        yield cluster.start()
    finally:
        cluster.destroy()


def fairmatch_command(url: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAIRMATCH_")}
    env["FAIRMATCH_DATABASE_URL"] = url
    return subprocess.run([FAIRMATCH, *args], env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def database(patroni) -> TestDatabase:
    """The fairmatch database on the leader, migrated by `fairmatch db upgrade` through the
    multi-host URL; `fairmatch db current` reads it through libpq's form of the same URL."""
    with psycopg.connect(patroni.url(), autocommit=True) as conn:
        conn.execute("CREATE DATABASE fairmatch")
    url = patroni.multi_host_url("fairmatch")
    upgraded = fairmatch_command(url, "db", "upgrade")
    assert upgraded.returncode == 0 and "upgraded from none to" in upgraded.stdout, upgraded.stdout + upgraded.stderr
    current = fairmatch_command(patroni.conninfo_url("fairmatch"), "db", "current")
    assert current.returncode == 0 and "up to date" in current.stdout, current.stdout + current.stderr
    return TestDatabase("postgresql", url, patroni.conninfo_url("fairmatch"))


@pytest.fixture
def server(database, tmp_path) -> Iterator[Server]:
    srv = start_server(
        database, tmp_path,
        JOBS__MATCHED_LEASE_SECONDS=str(LEASE_SECONDS), JOBS__LEASE_SWEEP_SECONDS="1",
        PRIORITY__INTERVAL_SECONDS="2",
    )  # fmt: skip
    try:
        yield srv
    finally:
        srv.stop()


# --- the pilots --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    path: str
    status: int | None  # None: no answer (transport error or client timeout)
    sent: float  # time.monotonic()
    seconds: float
    retry_after: str | None
    job_id: int | None = None  # a match's job
    error: str = ""


@dataclass
class Fleet:
    """What the pilots share: every answer, every job given, and when to stop."""

    server: Server
    database_url: str
    deadline: float
    answers: list[Answer] = field(default_factory=list)
    given: list[tuple[str, str, int]] = field(default_factory=list)  # (pilot, request id, job id)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def matched(self) -> int:
        return len(self.given)

    def post(self, http: httpx.Client, path: str, body: dict) -> Answer:
        sent = time.monotonic()
        try:
            response = http.post(self.server.api + path, json=body)
            job_id = response.json()["job_id"] if path == "/match" and response.status_code == 200 else None
            answer = Answer(path, response.status_code, sent, time.monotonic() - sent, response.headers.get("retry-after"),
                            job_id, response.text[:200] if response.is_error else "")  # fmt: skip
        except httpx.HTTPError as exc:
            answer = Answer(path, None, sent, time.monotonic() - sent, None, error=repr(exc))
        with self.lock:
            self.answers.append(answer)
        return answer

    def send(self, http: httpx.Client, path: str, body: dict) -> tuple[Answer, int]:
        """POST until answered below 500 (the same body each time); the answer and the attempts made."""
        for attempt in itertools.count(1):
            answer = self.post(http, path, body)
            if answer.status is not None and answer.status < 500:
                return answer, attempt
            assert time.monotonic() < self.deadline, f"{path} still failing at the deadline: {answer}"
            time.sleep(0.1)
        raise AssertionError("unreachable")

    def drained(self) -> bool:
        try:
            with psycopg.connect(self.database_url, connect_timeout=2) as conn:
                return conn.execute("SELECT NOT EXISTS (SELECT 1 FROM jobs WHERE status = 'Waiting')").fetchone()[0]
        except psycopg.Error:
            return False


def pilot(fleet: Fleet, name: str) -> None:
    """Match, run what was given to Done; stop once told 204 with nothing Waiting."""
    with httpx.Client(timeout=REQUEST_BOUND_SECONDS + 5, verify=False) as http:
        for n in itertools.count():
            assert time.monotonic() < fleet.deadline, f"{name}: still matching at the deadline"
            request_id = f"{name}-{n}"
            answer, _ = fleet.send(http, "/match", {**RESOURCE, "PilotReference": name, "request_id": request_id})
            if answer.status == 204:
                if fleet.drained():
                    return
                time.sleep(0.05)
                continue
            assert answer.status == 200 and answer.job_id is not None, answer
            job_id = answer.job_id
            with fleet.lock:
                fleet.given.append((name, request_id, job_id))
            for status in ("Running", "Done"):
                report, attempts = fleet.send(http, f"/jobs/{job_id}/status", {"status": status})
                # 409 after a failed attempt: that attempt was applied, only its answer was lost
                assert report.status == 200 or (report.status == 409 and attempts > 1), (job_id, status, report)


# --- the failover -------------------------------------------------------------------------------


@dataclass
class Failover:
    old_leader: Node | None = None
    new_leader: Node | None = None
    killed_at: float = 0.0  # time.monotonic()
    promoted_at: float = 0.0
    promoted_wall: datetime | None = None
    silent_job: int | None = None  # matched by a pilot that never reports, just before the kill


def fail_over(fleet: Fleet, patroni: PatroniCluster, failover: Failover) -> None:
    while fleet.matched < KILL_AT:
        assert time.monotonic() < fleet.deadline, f"only {fleet.matched} matched"
        time.sleep(0.02)
    with httpx.Client(timeout=REQUEST_BOUND_SECONDS, verify=False) as http:
        body = {**RESOURCE, "PilotReference": "silent", "request_id": "silent-0"}
        response = http.post(fleet.server.api + "/match", json=body)
        assert response.status_code == 200, response.text
        failover.silent_job = response.json()["job_id"]
    failover.old_leader = patroni.leader()
    assert failover.old_leader is not None
    pid = failover.old_leader.postmaster_pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    failover.killed_at = time.monotonic()
    while True:
        leader = patroni.leader()
        if leader is not None and leader.name != failover.old_leader.name:
            break
        assert time.monotonic() - failover.killed_at < 60, f"no promotion within 60 s\n{patroni.logs()}"
        time.sleep(0.05)
    failover.promoted_at, failover.promoted_wall = time.monotonic(), datetime.now(UTC)
    failover.new_leader = leader
    with fleet.lock:
        fleet.given.append(("silent", "silent-0", failover.silent_job))


def run(fleet: Fleet, patroni: PatroniCluster, failover: Failover) -> None:
    with ThreadPoolExecutor(max_workers=N_PILOTS + 1) as pool:
        injector = pool.submit(fail_over, fleet, patroni, failover)
        pilots = [pool.submit(pilot, fleet, f"pilot-{i:02d}") for i in range(N_PILOTS)]
        for future in [injector, *pilots]:
            future.result(timeout=RUN_SECONDS + 60)


# --- the test ------------------------------------------------------------------------------------


def test_failover_to_the_synchronous_standby(patroni, database, server):
    with server.client() as http:
        specs = [{"owner": f"user{i % 4}", "owner_group": "physics", "sites": ["S1"]} for i in range(N_JOBS)]
        for start in range(0, N_JOBS, SUBMIT_BATCH):
            response = http.post("/jobs", json={"jobs": specs[start : start + SUBMIT_BATCH]})
            assert response.status_code == 201, response.text
    server_pid = server.process.pid
    fleet = Fleet(server, database.sync_url, time.monotonic() + RUN_SECONDS)
    failover = Failover()

    started = time.monotonic()
    run(fleet, patroni, failover)
    run_seconds = time.monotonic() - started

    # the failover happened mid-run, to the node that was the synchronous standby
    assert failover.new_leader is not None and failover.new_leader != failover.old_leader
    timings = outage_timings(fleet, failover)
    print("\nfailover:", {**timings, "pilots_run_s": round(run_seconds, 1)})
    # no answer a pilot could not act on, none slower than the bound
    bad = [a for a in fleet.answers if a.status is None or (a.status >= 500 and a.status != 503)]
    assert bad == [], bad[:10]
    assert [a for a in fleet.answers if a.status == 503 and not a.retry_after] == []
    slowest = max(a.seconds for a in fleet.answers)
    assert slowest < REQUEST_BOUND_SECONDS, slowest
    # the outage was seen (as 503s), and the service recovered without a restart
    assert timings["503s"] > 0, timings
    assert timings["kill_to_promotion_s"] < LEASE_SECONDS, timings  # so the silent pilot's lease lapses after it
    assert timings["first_match_after_promotion_s"] < RECOVERY_SECONDS, timings
    assert server.process.pid == server_pid and server.process.poll() is None

    check_background_loops(database.sync_url, failover)
    check_no_duplicate_no_loss(database.sync_url, fleet)


def outage_timings(fleet: Fleet, failover: Failover) -> dict:
    after_promotion = [a for a in fleet.answers if a.path == "/match" and a.status == 200
                       and a.sent + a.seconds > failover.promoted_at]  # fmt: skip
    assert after_promotion, "no successful match after the promotion"
    first = min(a.sent + a.seconds for a in after_promotion)
    during = [a for a in fleet.answers if a.sent + a.seconds > failover.killed_at]
    return {
        "kill_to_promotion_s": round(failover.promoted_at - failover.killed_at, 2),
        "first_match_after_promotion_s": round(first - failover.promoted_at, 2),
        "kill_to_first_match_s": round(first - failover.killed_at, 2),
        "503s": sum(a.status == 503 for a in during),
        "slowest_request_s": round(max(a.seconds for a in fleet.answers), 2),
        "requests": len(fleet.answers),
    }


def check_background_loops(url: str, failover: Failover) -> None:
    """On the new primary: a priority run after the promotion; the silent pilot's lease,
    lapsed after it, swept back to Waiting."""
    assert failover.silent_job is not None and failover.promoted_wall is not None
    deadline = time.monotonic() + LEASE_SECONDS + 15
    with psycopg.connect(url, autocommit=True) as conn:
        while True:
            runs = conn.execute("SELECT count(*) FROM priority_runs WHERE finished_at > %s",
                                (failover.promoted_wall,)).fetchone()[0]  # fmt: skip
            returned = conn.execute(
                "SELECT count(*) FROM job_events WHERE job_id = %s AND status = 'Waiting' AND source = 'lease'"
                " AND at > %s", (failover.silent_job, failover.promoted_wall)).fetchone()[0]  # fmt: skip
            if runs and returned:
                return
            assert time.monotonic() < deadline, f"priority runs after promotion: {runs}, lease returns: {returned}"
            time.sleep(0.2)


def check_no_duplicate_no_loss(url: str, fleet: Fleet) -> None:
    given: dict[int, set[tuple[str, str]]] = defaultdict(set)
    for name, request_id, job_id in fleet.given:
        given[job_id].add((name, request_id))
    with psycopg.connect(url) as conn:
        status = dict(conn.execute("SELECT id, status FROM jobs").fetchall())
        events: dict[int, list[tuple[str, str]]] = defaultdict(list)
        for job_id, state, source in conn.execute("SELECT job_id, status, source FROM job_events ORDER BY id"):
            events[job_id].append((state, source))
        requests = dict(conn.execute("SELECT request_id, job_id FROM match_requests").fetchall())
    assert len(status) == N_JOBS
    assert set(status.values()) <= LIVE_STATES, set(status.values())
    for job_id, state in status.items():
        matches = [i for i, (s, _) in enumerate(events[job_id]) if s == "Matched"]
        holders = given.get(job_id, set())
        # handed out exactly as often as matched; a second match only after a lease return
        assert len(holders) == len(matches), (job_id, sorted(holders), events[job_id])
        for earlier, later in itertools.pairwise(matches):
            assert ("Waiting", "lease") in events[job_id][earlier:later], (job_id, events[job_id])
        # each request id names its job, until a lease return forgets the match
        named = [request_id for _, request_id in holders if requests.get(request_id) == job_id]
        returned = ("Waiting", "lease") in events[job_id]
        assert len(named) <= 1 if returned else len(named) == len(holders), (job_id, sorted(holders), named)
        # not lost: Waiting, or where the last pilot given it left it (the silent one: lease returned)
        silent_only = {name for name, _ in holders} == {"silent"}
        expected = "Waiting" if not holders or silent_only else "Done"
        assert state == expected, (job_id, state, sorted(holders), events[job_id])
