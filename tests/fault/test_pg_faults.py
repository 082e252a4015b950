"""No loss, no duplicates, through a server SIGKILL and a PostgreSQL restart.

32 pilots drain 5 000 jobs from two servers on a PostgreSQL cluster the test
owns. A third of the way in, server 2 is killed with SIGKILL and restarted on
its port; two thirds in, PostgreSQL is restarted (fast mode: every session
cut). Pilots retry failed requests with the same request_id. Afterwards the
database and the pilots' own logs must agree: every job handed out exactly
once, none lost, none stuck, every queue entry a Waiting job.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest

from tests.conftest import Server, start_server, wait_until_ready
from tests.fault.cluster import PgCluster
from tests.fault.pilots import REPORT_EVERY, Fleet, Pilot, read_logs

pytestmark = [pytest.mark.fault, pytest.mark.timeout(280)]

N_JOBS = 5000
N_PILOTS = 32
OWNERS = ("alice", "bob", "carol", "dave", "erin")  # one task queue each
SUBMIT_BATCH = 500
RUN_SECONDS = 180  # hard bound on the pilots' run
KILL_AT, PG_RESTART_AT = N_JOBS // 3, 2 * N_JOBS // 3
LIVE_STATES = {"Waiting", "Matched", "Running", "Done"}


# --- set-up ------------------------------------------------------------------------------


@pytest.fixture
def servers(cluster_db, tmp_path) -> Iterator[list[Server]]:
    started: list[Server] = []
    try:
        for _ in range(2):
            started.append(start_server(cluster_db, tmp_path))
        yield started
    finally:
        for srv in started:
            srv.stop()


def submit_jobs(server: Server, n: int) -> None:
    specs = [{"owner": OWNERS[i % len(OWNERS)], "owner_group": "physics", "sites": ["S1"]} for i in range(n)]
    with server.client() as http:
        for start in range(0, n, SUBMIT_BATCH):
            response = http.post("/jobs", json={"jobs": specs[start : start + SUBMIT_BATCH]})
            assert response.status_code == 201, response.text


def waiting_probe(url: str, every: float = 0.25) -> Callable[[], bool]:
    """`drained()` for the pilots: no Waiting job left; cached, and False while the database is away."""
    lock, state = threading.Lock(), {"at": 0.0, "drained": False}

    def drained() -> bool:
        with lock:
            if time.monotonic() - state["at"] > every:
                state["drained"], state["at"] = _no_waiting_job(url), time.monotonic()
            return state["drained"]

    return drained


def _no_waiting_job(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            query = "SELECT NOT EXISTS (SELECT 1 FROM jobs WHERE status = 'Waiting')"
            return conn.execute(query).fetchone()[0]
    except psycopg.Error:
        return False


# --- faults ----------------------------------------------------------------------------------


@dataclass
class Faults:
    kills: int = 0
    pg_restarts: int = 0
    events: list[dict] = field(default_factory=list)

    def record(self, fault: str, matched: int, old_pid: int | None, new_pid: int | None) -> None:
        self.events.append({"fault": fault, "matched": matched, "old_pid": old_pid, "new_pid": new_pid})


def restart_on_same_port(server: Server) -> None:
    """Start the server again, same port, environment and log."""
    server.process = server.process.restarted()
    assert wait_until_ready(server.url, server.process, seconds=30), server.log()[-3000:]


def wait_for_matches(fleet: Fleet, target: int) -> None:
    while fleet.matched < target:
        assert time.monotonic() < fleet.deadline, f"only {fleet.matched} matched, waiting for {target}"
        time.sleep(0.02)


def inject_faults(fleet: Fleet, victim: Server, cluster: PgCluster, faults: Faults) -> None:
    wait_for_matches(fleet, KILL_AT)
    matched_then, old_pid = fleet.matched, victim.process.pid
    os.kill(old_pid, signal.SIGKILL)
    victim.process.wait()
    faults.kills += 1
    time.sleep(1)
    restart_on_same_port(victim)
    faults.record("SIGKILL server 2, restart on its port", matched_then, old_pid, victim.process.pid)

    wait_for_matches(fleet, PG_RESTART_AT)
    matched_then, old_pid = fleet.matched, cluster.postmaster_pid()
    cluster.restart()
    faults.pg_restarts += 1
    faults.record("PostgreSQL restart -m fast", matched_then, old_pid, cluster.postmaster_pid())


# --- the run -----------------------------------------------------------------------------


def run_pilots(fleet: Fleet, log_dir: Path, faults_job: Callable[[], None]) -> float:
    """All pilots and the fault injector at once; the pilots' wall time. Re-raises any failure."""
    pilots = [Pilot(i, fleet, log_dir) for i in range(N_PILOTS)]
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=N_PILOTS + 1) as pool:
        injector = pool.submit(faults_job)
        running = [pool.submit(p.run) for p in pilots]
        for future in running:
            future.result(timeout=RUN_SECONDS + 30)
        wall = time.monotonic() - started
        injector.result(timeout=60)
    return wall


# --- what the database and the logs say ---------------------------------------------------------


@dataclass
class DatabaseState:
    status: dict[int, str]
    pilot: dict[int, str | None]
    matched_at: dict[int, float | None]
    queued: set[int]
    requests: dict[str, int]  # match_requests: request_id -> job_id


def read_database(url: str) -> DatabaseState:
    with psycopg.connect(url) as conn:
        jobs = conn.execute("SELECT id, status, pilot_reference, matched_at FROM jobs").fetchall()
        queued = {row[0] for row in conn.execute("SELECT job_id FROM tq_jobs")}
        requests = dict(conn.execute("SELECT request_id, job_id FROM match_requests").fetchall())
    return DatabaseState(
        status={j: s for j, s, _, _ in jobs},
        pilot={j: p for j, _, p, _ in jobs},
        matched_at={j: m.timestamp() if m else None for j, _, _, m in jobs},
        queued=queued,
        requests=requests,
    )


def handed_out(logs: dict[str, list[dict]]) -> dict[int, set[tuple[str, str]]]:
    """job id -> every (pilot, request_id) that was given it."""
    holders: dict[int, set[tuple[str, str]]] = defaultdict(set)
    for pilot, entries in logs.items():
        for entry in entries:
            holders[entry["job_id"]].add((pilot, entry["request_id"]))
    return holders


def answers_lost_after_commit(logs: dict[str, list[dict]], db: DatabaseState) -> int:
    """Requests whose job was claimed by an earlier, failed attempt and handed back on a retry."""
    return sum(
        1
        for entries in logs.values()
        for e in entries
        if not e["replay"] and e["attempts"] > 1 and (db.matched_at[e["job_id"]] or 0) < e["sent_at"]
    )


def summarise(db: DatabaseState, logs: dict, fleet: Fleet, faults: Faults, wall: float) -> dict:
    holders = handed_out(logs)
    return {
        "jobs": len(db.status), "pilots": N_PILOTS, "kills": faults.kills, "pg_restarts": faults.pg_restarts,
        "duplicates": {job: sorted(who) for job, who in holders.items() if len(who) > 1},
        "lost": sorted(j for j, s in db.status.items() if s != "Waiting" and j not in holders),
        "503s": fleet.counts["503"], "retries": fleet.counts["retries"],
        "transport_errors": sum(n for k, n in fleet.counts.items() if k.startswith("transport:")),
        "answers_lost_after_commit": answers_lost_after_commit(logs, db),
        "replays": fleet.counts["replays"], "done": fleet.counts["done"],
        "conflicts_after_retry": fleet.counts["conflicts_after_retry"],
        "bad_answers": len(fleet.bad_answers), "wall_seconds": round(wall, 1),
        "faults": faults.events, "counts": dict(fleet.counts),
    }  # fmt: skip


def report(summary: dict, path: Path) -> None:
    path.write_text(json.dumps(summary, indent=2))
    figures = {k: len(v) if k in ("duplicates", "lost") else v for k, v in summary.items() if k != "counts"}
    print("\nfault run:", json.dumps(figures))


# --- the test ---------------------------------------------------------------------------------


def test_no_loss_no_duplicates_through_kill_and_pg_restart(pg_cluster, cluster_db, servers, tmp_path):
    submit_jobs(servers[0], N_JOBS)
    log_dir = tmp_path / "pilots"
    log_dir.mkdir()
    fleet = Fleet(servers, time.monotonic() + RUN_SECONDS, waiting_probe(cluster_db.url))
    faults = Faults()
    first_server_pid = servers[0].process.pid

    wall = run_pilots(fleet, log_dir, lambda: inject_faults(fleet, servers[1], pg_cluster, faults))

    db = read_database(cluster_db.url)
    logs = read_logs(log_dir)
    summary = summarise(db, logs, fleet, faults, wall)
    report(summary, tmp_path / "fault-summary.json")

    # no job handed to two pilots, none handed out and forgotten
    assert summary["duplicates"] == {}, list(summary["duplicates"].items())[:10]
    assert summary["lost"] == [], summary["lost"][:20]
    # the service answered sanely throughout: 200/204, or 503 problem+json with Retry-After
    assert fleet.bad_answers == [], fleet.bad_answers[:20]
    # the faults really happened, mid-run, and the untouched server lived through them
    assert faults.kills == 1 and faults.pg_restarts == 1, faults
    for event in faults.events:
        assert event["new_pid"] != event["old_pid"] and event["matched"] < N_JOBS, event
    assert servers[0].process.pid == first_server_pid and servers[0].process.poll() is None
    assert servers[1].process.poll() is None
    # every job in a live state, drained, and queued exactly while Waiting
    assert len(db.status) == N_JOBS
    assert set(db.status.values()) <= LIVE_STATES, set(db.status.values()) - LIVE_STATES
    assert db.queued == {j for j, s in db.status.items() if s == "Waiting"}
    assert [j for j, s in db.status.items() if s == "Waiting"] == []
    check_logs_match_database(logs, db)


def check_logs_match_database(logs: dict[str, list[dict]], db: DatabaseState) -> None:
    """Each logged job went to that pilot under that request_id, and is in the state the pilot left it."""
    for pilot, entries in logs.items():
        for e in entries:
            job = e["job_id"]
            assert db.pilot[job] == pilot, (pilot, e, db.pilot[job])
            assert db.requests.get(e["request_id"]) == job, (pilot, e)
            expected = "Done" if job % REPORT_EVERY == 0 else "Matched"
            assert db.status[job] == expected, (pilot, e, db.status[job])
