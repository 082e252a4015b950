"""Concurrent pilots, submitters and killers against one server: no job is claimed twice, none is lost.

- every job is handed out exactly once, however many pilots ask at the same time;
- concurrent submissions of identical requirements never create two TQs;
- a job is in tq_jobs exactly while it is Waiting, and its TQ row exists, whatever races;
- the same request_id sent by many pilots at once claims one job, and all get that job.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import sqlalchemy as sa

PILOT = {"Site": "S1", "CPUTime": 10**7}


# --- helpers ---------------------------------------------------------------------------


def spec(**overrides) -> dict:
    return {"owner": "alice", "owner_group": "physics", **overrides}


def submit(client: httpx.Client, specs: list[dict]) -> list[int]:
    r = client.post("/jobs", json={"jobs": specs})
    assert r.status_code == 201, r.text
    return [j["job_id"] for j in r.json()["jobs"]]


def run_together(
    server,
    workers: list[Callable[[httpx.Client], object]],
    background: list[Callable[[httpx.Client, threading.Event], object]] = (),
) -> tuple[list, list]:
    """Run each worker in its own thread with its own client, all released at once.

    `background` workers run until every `workers` one has finished, then are told to stop.
    Returns both lists of results, in order; a worker's exception is re-raised here.
    """
    everyone = len(workers) + len(background)
    barrier = threading.Barrier(everyone)
    stop = threading.Event()

    def run(worker, *args):
        with server.client() as client:
            barrier.wait(timeout=30)
            return worker(client, *args)

    with ThreadPoolExecutor(max_workers=everyone) as pool:
        finite = [pool.submit(run, w) for w in workers]
        endless = [pool.submit(run, w, stop) for w in background]
        try:
            done = [f.result(timeout=120) for f in finite]
        finally:
            stop.set()
        return done, [f.result(timeout=120) for f in endless]


def query(database, sql: str, **params) -> list:
    engine = database.engine()
    with engine.connect() as conn:
        rows = conn.execute(sa.text(sql), params).all()
    engine.dispose()
    return rows


def assert_queue_invariants(database) -> None:
    """A job is in tq_jobs iff it is Waiting, in the TQ it names, and that TQ row exists."""
    waiting_not_queued = query(
        database,
        "SELECT j.id FROM jobs j WHERE j.status = 'Waiting' "
        "AND NOT EXISTS (SELECT 1 FROM tq_jobs t WHERE t.job_id = j.id)",
    )
    assert waiting_not_queued == [], "Waiting jobs missing from tq_jobs"
    queued_not_waiting = query(
        database,
        "SELECT t.job_id, j.status FROM tq_jobs t JOIN jobs j ON j.id = t.job_id WHERE j.status <> 'Waiting'",
    )
    assert queued_not_waiting == [], "non-Waiting jobs still in tq_jobs"
    wrong_queue = query(
        database,
        "SELECT t.job_id FROM tq_jobs t JOIN jobs j ON j.id = t.job_id WHERE t.tq_id <> j.task_queue_id",
    )
    assert wrong_queue == [], "tq_jobs and jobs disagree on the TQ"
    orphans = query(
        database,
        "SELECT t.job_id FROM tq_jobs t WHERE NOT EXISTS (SELECT 1 FROM task_queues q WHERE q.id = t.tq_id)",
    )
    assert orphans == [], "waiting jobs whose TQ row is gone"
    dangling = query(
        database,
        "SELECT t.job_id FROM tq_jobs t WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = t.job_id)",
    )
    assert dangling == []


def statuses(database) -> Counter:
    return Counter(dict(query(database, "SELECT status, count(*) FROM jobs GROUP BY status")))


# --- many pilots drain the queues ------------------------------------------------------


def pilot(name: str) -> Callable[[httpx.Client], dict]:
    """Match until told 204; what it got and every status it saw."""

    def work(client: httpx.Client) -> dict:
        got, seen = [], []
        for _ in range(1000):
            r = client.post("/match", json={**PILOT, "PilotReference": name})
            seen.append(r.status_code)
            if r.status_code == 204:
                break
            assert r.status_code == 200, r.text
            got.append(r.json()["job_id"])
        return {"jobs": got, "statuses": seen}

    return work


def test_concurrent_pilots_get_every_job_exactly_once(client, server, database):
    # 300 jobs over 6 TQs (3 owners x 2 site lists), two user-priority levels in each
    specs = [
        spec(owner=f"user{i % 3}", sites=["S1"] if i % 2 else [], user_priority=1 + i % 4 // 2) for i in range(300)
    ]
    submitted = submit(client, specs[:150]) + submit(client, specs[150:])
    assert len(client.get("/taskqueues").json()["task_queues"]) == 6

    results, _ = run_together(server, [pilot(f"pilot-{n}") for n in range(16)])

    handed_out = [j for r in results for j in r["jobs"]]
    duplicates = [j for j, n in Counter(handed_out).items() if n > 1]
    assert duplicates == [], "jobs handed out twice"
    assert sorted(handed_out) == sorted(submitted)
    for r in results:
        assert r["statuses"][-1] == 204  # every pilot was finally told there is nothing left
        assert all(code in (200, 204) for code in r["statuses"]), Counter(r["statuses"])
    assert statuses(database) == Counter({"Matched": 300})
    assert query(database, "SELECT count(*) FROM tq_jobs")[0][0] == 0
    # the pilot recorded on each job is the one that was given it
    owner = {j: f"pilot-{n}" for n, r in enumerate(results) for j in r["jobs"]}
    recorded = dict(query(database, "SELECT id, pilot_reference FROM jobs"))
    assert recorded == owner
    events = query(database, "SELECT job_id, count(*) FROM job_events WHERE status = 'Matched' GROUP BY job_id")
    assert {n for _, n in events} == {1} and len(events) == 300
    assert client.post("/match", json=PILOT).status_code == 204
    assert_queue_invariants(database)


# --- concurrent submissions of identical requirements ----------------------------------


@pytest.mark.parametrize("shape", ["same", "shuffled-sets"])
def test_concurrent_identical_submissions_share_one_task_queue(client, server, database, shape):
    def submitter(n: int) -> Callable[[httpx.Client], list[int]]:
        sites = ["S1", "S2", "S3"]
        if shape == "shuffled-sets":
            random.Random(n).shuffle(sites)
            sites = sites + sites[:1]  # duplicates normalise away too

        def work(client: httpx.Client) -> list[int]:
            ids = []
            for _ in range(5):
                ids += submit(client, [spec(sites=sites, tags=["GPU"], payload=n) for _ in range(20)])
            return ids

        return work

    results, _ = run_together(server, [submitter(n) for n in range(8)])

    ids = [j for r in results for j in r]
    assert len(ids) == len(set(ids)) == 8 * 5 * 20
    tqs = query(database, "SELECT id FROM task_queues")
    assert len(tqs) == 1, "identical requirements made more than one TQ"
    tq_id = tqs[0][0]
    assert query(database, "SELECT count(*) FROM tq_jobs WHERE tq_id = :t", t=tq_id)[0][0] == 800
    answer = client.get("/taskqueues").json()["task_queues"]
    assert [(q["task_queue_id"], q["jobs"], q["sites"]) for q in answer] == [(tq_id, 800, ["S1", "S2", "S3"])]
    assert_queue_invariants(database)


# --- submit, match and kill racing on the same requirements ---------------------------


def test_racing_submit_match_and_kill_keep_tq_jobs_equal_to_the_waiting_jobs(client, server, database):
    """Matchers empty the TQ (which then gets deleted) while submitters refill it and killers empty it."""
    submitted: list[int] = []

    def submitter(client: httpx.Client) -> list[int]:
        codes = []
        for _ in range(15):
            r = client.post("/jobs", json={"jobs": [spec() for _ in range(3)]})
            codes.append(r.status_code)
            if r.status_code == 201:
                submitted.extend(j["job_id"] for j in r.json()["jobs"])  # list.extend is atomic
        return codes

    def matcher(client: httpx.Client, stop: threading.Event) -> list[int]:
        codes = []
        while not stop.is_set():
            codes.append(client.post("/match", json=PILOT).status_code)
            if codes[-1] == 204:
                time.sleep(0.005)
        return codes

    def killer(client: httpx.Client, stop: threading.Event) -> list[int]:
        codes, rng = [], random.Random()
        while not stop.is_set():
            recent = submitted[-12:]
            if not recent:
                time.sleep(0.005)
                continue
            codes.append(client.delete(f"/jobs/{rng.choice(recent)}").status_code)
        return codes

    sub_results, other_results = run_together(server, [submitter] * 4, [matcher] * 3 + [killer] * 2)

    assert {c for r in sub_results for c in r} == {201}
    other_codes = Counter(c for r in other_results for c in r)
    assert set(other_codes) <= {200, 204, 409}, other_codes
    assert other_codes[200] > 0
    assert len(submitted) == len(set(submitted)) == 4 * 15 * 3
    assert_queue_invariants(database)
    counts = statuses(database)
    assert sum(counts.values()) == len(submitted)
    assert set(counts) <= {"Waiting", "Matched", "Killed"}
    kill_events = query(database, "SELECT job_id, count(*) FROM job_events WHERE status = 'Killed' GROUP BY job_id")
    assert all(n == 1 for _, n in kill_events)
    assert len(kill_events) == counts["Killed"]
    # whatever is still waiting can be matched: nothing is stranded in a missing TQ
    for _ in range(counts["Waiting"]):
        assert client.post("/match", json=PILOT).status_code == 200
    assert client.post("/match", json=PILOT).status_code == 204
    assert_queue_invariants(database)


# --- idempotent matching under concurrency --------------------------------------------


def test_same_request_id_sent_concurrently_claims_one_job_for_everyone(client, server, database):
    submit(client, [spec(payload=i) for i in range(20)])

    def ask(client: httpx.Client) -> int:
        body = {**PILOT, "request_id": "pilot-7-attempt-1", "PilotReference": "pilot-7"}
        r = client.post("/match", json=body)
        assert r.status_code == 200, r.text
        return r.json()["job_id"]

    answers, _ = run_together(server, [ask] * 8)

    assert len(set(answers)) == 1, answers
    assert statuses(database) == Counter({"Matched": 1, "Waiting": 19})
    matched = query(database, "SELECT id FROM jobs WHERE status = 'Matched'")
    assert matched[0][0] == answers[0]
    assert query(database, "SELECT job_id FROM match_requests") == [(answers[0],)]
    assert query(database, "SELECT count(*) FROM job_events WHERE status = 'Matched'")[0][0] == 1
    # and a later retry still gets the same job
    again = client.post("/match", json={**PILOT, "request_id": "pilot-7-attempt-1"})
    assert again.status_code == 200 and again.json()["job_id"] == answers[0]
    assert_queue_invariants(database)


def test_distinct_request_ids_sent_concurrently_claim_distinct_jobs(client, server, database):
    submit(client, [spec() for _ in range(8)])

    def asker(n: int) -> Callable[[httpx.Client], int]:
        def work(client: httpx.Client) -> int:
            r = client.post("/match", json={**PILOT, "request_id": f"req-{n}"})
            assert r.status_code == 200, r.text
            return r.json()["job_id"]

        return work

    answers, _ = run_together(server, [asker(n) for n in range(8)])
    assert len(set(answers)) == 8
    assert statuses(database) == Counter({"Matched": 8})
