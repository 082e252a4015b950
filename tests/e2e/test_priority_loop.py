"""The priority loop: one leader at a time, history samples, stalls, /shares.

The watchdogs' rules are checked in process on a simulated clock
(tests/db/test_watchdogs.py); here, that the server's loops run them."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from datetime import datetime, timedelta

import httpx
import pytest
import sqlalchemy as sa

from fairmatch.clock import as_utc, utcnow
from fairmatch.db.engine import create_engine, read_transaction
from fairmatch.db.running_samples import RunningSampleDB
from fairmatch.db.tables import history_samples, running_samples
from fairmatch.services import history
from tests.e2e.test_leases_and_shutdown import wait_for

SHARED_CFG = "config/share-corrections.cfg"


def _parsed(db) -> list[tuple]:
    """(runner, started, finished) of every priority run, oldest first."""

    def when(value):  # SQLite hands back text
        return as_utc(value if isinstance(value, datetime) else datetime.fromisoformat(str(value)))

    with db.engine().connect() as conn:
        rows = conn.execute(sa.text("SELECT runner, started_at, finished_at FROM priority_runs")).all()
    return sorted((r[0], when(r[1]), when(r[2])) for r in rows)


def assert_never_overlapping(rows: list[tuple]) -> None:
    ordered = sorted(rows, key=lambda r: r[1])
    for before, after in itertools.pairwise(ordered):
        assert after[1] >= before[2], f"runs overlap: {before} and {after}"


# The two tests counting priority runs and their runners use a database of their own: the
# session servers' loops run on the shared one too and would add runs and a third runner.


def test_two_processes_run_the_loop_one_at_a_time_once_per_interval(private_server_factory, private_database):
    servers = [private_server_factory(PRIORITY__INTERVAL_SECONDS="0.5") for _ in range(2)]
    with servers[0].client() as api:
        api.post("/jobs", json={"jobs": [{"owner": f"o{i}", "owner_group": f"g{i % 3}"} for i in range(30)]})
    time.sleep(4)
    scheduled = _parsed(private_database)
    assert len(scheduled) >= 4, scheduled
    assert_never_overlapping(scheduled)
    starts = sorted(r[1] for r in scheduled)
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(starts)]
    # two processes each trying every 0.5 s, yet runs are spaced by the interval, not halved
    assert min(gaps) >= 0.45 * 0.9, gaps
    assert len({r[0] for r in scheduled}) >= 1


def test_forced_runs_from_two_processes_wait_for_each_other(private_server_factory, private_database):
    servers = [private_server_factory(PRIORITY__INTERVAL_SECONDS="3600") for _ in range(2)]
    with servers[0].client() as api:
        api.post("/jobs", json={"jobs": [{"owner": f"o{i}", "owner_group": f"g{i % 4}"} for i in range(200)]})
    # the servers' own first run comes a second after start: let it pass first
    assert wait_for(lambda: len(_parsed(private_database)) >= 1, seconds=10)
    time.sleep(1.5)
    before = len(_parsed(private_database))
    answers: list[int] = []

    def hammer(server):
        with server.client() as api:
            for _ in range(5):
                answers.append(api.post("/priorities/recompute").status_code)

    threads = [threading.Thread(target=hammer, args=(s,)) for s in servers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert answers == [200] * 10
    rows = _parsed(private_database)
    assert len(rows) - before == 10
    assert_never_overlapping(rows)
    assert len({r[0] for r in rows}) == 2  # both processes did run


def test_recompute_sets_dirac_priorities_and_explains_them(client):
    assert client.put("/groups/big", json={"job_share": 3000}).status_code in (200, 201)
    client.post("/jobs", json={"jobs": [{"owner": "a", "owner_group": "big"}, {"owner": "b", "owner_group": "big"},
                                        {"owner": "c", "owner_group": "small"}]})  # fmt: skip
    run = client.post("/priorities/recompute").json()
    assert run["policy"] == "dirac" and run["task_queues"] == 3
    tqs = {tq["owner"]: tq for tq in client.get("/taskqueues").json()["task_queues"]}
    assert {o: tq["priority"] for o, tq in tqs.items()} == {"a": 1500, "b": 1500, "c": 1000}
    origin = tqs["a"]["priority_origin"]
    assert (origin["group"], origin["owner"], origin["configured_share"]) == ("big", "a", 1500)
    shares = client.get("/shares").json()
    assert [(e["group"], e["owner"], e["share"]) for e in shares["entities"]] == [
        ("big", "a", 1500),
        ("big", "b", 1500),
        ("small", "c", 1000),
    ]
    assert sum(e["normalised_share"] for e in shares["entities"]) == pytest.approx(1)


def test_shares_explain_the_corrections_of_the_dirac_cfg(server_factory, clean):
    server = server_factory(PRIORITY__CORRECTIONS_ENABLED="true", PRIORITY__CORRECTIONS_FILE=SHARED_CFG)
    with server.client() as api:
        api.post("/jobs", json={"jobs": [{"owner": "u1", "owner_group": "lhcb_user"},
                                         {"owner": "u2", "owner_group": "lhcb_user"},
                                         {"owner": "prod", "owner_group": "lhcb_mc"}]})  # fmt: skip
        api.post("/priorities/recompute")
        shares = api.get("/shares").json()
    assert shares["corrections_enabled"] is True
    assert set(shares["corrections"]) == {"GroupsInstance", "lhcb_userInstance"}
    groups_instance = shares["corrections"]["GroupsInstance"]
    assert set(groups_instance["entities"]) == {"lhcb_user", "lhcb_mc"}
    week = groups_instance["entities"]["lhcb_mc"]["slices"]["WeekSlice"]
    assert week["weight"] == 80 and week["share_fraction"] == pytest.approx(0.5)
    assert set(shares["corrections"]["lhcb_userInstance"]["entities"]) == {"u1", "u2"}


def test_a_running_job_without_heartbeat_becomes_stalled(server_factory, clean):
    server = server_factory(JOBS__STALL_TIMEOUT_SECONDS="1", JOBS__LEASE_SWEEP_SECONDS="0.3")
    with server.client() as api:
        api.post("/jobs", json={"jobs": [{"owner": "a", "owner_group": "g"}] * 2})
        silent = api.post("/match", json={"Site": "S", "CPUTime": 10**6}).json()["job_id"]
        alive = api.post("/match", json={"Site": "S", "CPUTime": 10**6}).json()["job_id"]
        for job in (silent, alive):
            assert api.post(f"/jobs/{job}/status", json={"status": "Running"}).status_code == 200
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:  # heartbeats keep one alive
            api.post(f"/jobs/{alive}/status", json={"status": "Running"})
            time.sleep(0.25)
        assert wait_for(lambda: api.get(f"/jobs/{silent}").json()["status"] == "Stalled", seconds=5)
        assert api.get(f"/jobs/{alive}").json()["status"] == "Running"
        assert api.get(f"/jobs/{silent}").json()["minor_status"] == "no heartbeat"
        # a stalled job may be rescheduled
        assert api.post(f"/jobs/{silent}/status", json={"status": "Waiting"}).json()["status"] == "Waiting"
    with clean.engine().connect() as conn:
        events = conn.exec_driver_sql(
            f"SELECT status, source FROM job_events WHERE job_id = {int(silent)} ORDER BY id"
        ).all()
    assert ("Stalled", "stall") in [tuple(e) for e in events]


def test_the_sampler_records_running_jobs_per_group_and_owner(server_factory, clean):
    server = server_factory(PRIORITY__SAMPLE_SECONDS="0.2")
    with server.client() as api:
        api.post(
            "/jobs", json={"jobs": [{"owner": "a", "owner_group": "g"}] * 3 + [{"owner": "b", "owner_group": "h"}]}
        )
        for _ in range(4):
            api.post("/match", json={"Site": "S", "CPUTime": 10**6})
    time.sleep(0.8)
    with clean.engine().connect() as conn:
        latest = conn.exec_driver_sql("SELECT max(id) FROM history_samples").scalar()
        rows = conn.exec_driver_sql(
            f"SELECT owner_group, owner, running FROM running_samples WHERE sample_id = {int(latest)}"
        ).all()
    assert sorted(tuple(r) for r in rows) == [("g", "", 3), ("g", "a", 3), ("h", "", 1), ("h", "b", 1)]


def _run(db, coro_factory):
    async def main():
        engine = create_engine(db.url)
        try:
            async with engine.connect() as conn:
                return await coro_factory(conn)
        finally:
            await engine.dispose()

    return asyncio.run(main())


def test_averages_count_empty_instants_and_old_samples_are_pruned(clean):
    now = utcnow()

    async def scenario(conn):
        async with conn.begin():
            for seconds_ago, running in ((7200, 50), (30, 4), (20, 0), (10, 2)):
                sample_id = (
                    await conn.execute(
                        sa.insert(history_samples)
                        .values(sampled_at=now - timedelta(seconds=seconds_ago))
                        .returning(history_samples.c.id)
                    )
                ).scalar_one()
                if running:
                    await conn.execute(sa.insert(running_samples), [
                        {"sample_id": sample_id, "owner_group": "g", "owner": "", "running": running},
                        {"sample_id": sample_id, "owner_group": "g", "owner": "alice", "running": running},
                    ])  # fmt: skip
        async with read_transaction(conn):
            recent = await RunningSampleDB.of(conn).average_running(None, now - timedelta(seconds=60))
            users = await RunningSampleDB.of(conn).average_running("g", now - timedelta(seconds=60))
        took = await history.sample(conn, now, every_seconds=5, keep_seconds=3600, reported_seconds=600)
        async with conn.begin():
            left = (await conn.execute(sa.select(sa.func.count()).select_from(history_samples))).scalar()
        again = await history.sample(conn, now, every_seconds=5, keep_seconds=3600, reported_seconds=600)
        return recent, users, took, left, again

    recent, users, took, left, again = _run(clean, scenario)
    assert recent == {"g": pytest.approx((4 + 0 + 2) / 3)}  # the empty instant counts as 0
    assert users == {"alice": pytest.approx(2)}
    assert took is True and again is False  # a second sample within the interval is skipped
    assert left == 4  # the 2-hour-old sample is gone, the new one is in


def test_new_task_queues_get_provisional_priorities_at_once(client):
    """No recompute call: the submission itself refreshes the groups that got new queues."""
    client.put("/groups/big", json={"job_share": 3000})

    def priorities():
        return {(t["owner_group"], t["owner"]): t["priority"] for t in client.get("/taskqueues").json()["task_queues"]}

    client.post("/jobs", json={"jobs": [{"owner": "a", "owner_group": "big"}]})
    assert priorities() == {("big", "a"): 3000}
    client.post("/jobs", json={"jobs": [{"owner": "b", "owner_group": "big"}]})
    assert priorities() == {("big", "a"): 1500, ("big", "b"): 1500}  # a's share was split at once
    client.post("/jobs", json={"jobs": [{"owner": "c", "owner_group": "small", "user_priority": 3},
                                        {"owner": "c", "owner_group": "small", "tags": ["X"]}]})  # fmt: skip
    tqs = {(t["owner_group"], tuple(t["tags"])): t["priority"] for t in client.get("/taskqueues").json()["task_queues"]}
    assert tqs[("small", ())] == pytest.approx(750) and tqs[("small", ("X",))] == pytest.approx(250)
    assert tqs[("big", ())] == 1500


def _stall_one(api: httpx.Client) -> int:
    """A job that runs, then falls silent and is marked Stalled by the watchdog."""
    api.post("/jobs", json={"jobs": [{"owner": "a", "owner_group": "g"}]})
    job_id = api.post("/match", json={"Site": "S", "CPUTime": 10**6}).json()["job_id"]
    assert api.post(f"/jobs/{job_id}/status", json={"status": "Running"}).status_code == 200
    assert wait_for(lambda: api.get(f"/jobs/{job_id}").json()["status"] == "Stalled", seconds=5)
    return job_id


def _events(database, job_id: int) -> list[tuple[str, str]]:
    with database.engine().connect() as conn:
        rows = conn.exec_driver_sql(f"SELECT status, source FROM job_events WHERE job_id = {int(job_id)} ORDER BY id")
        return [tuple(row) for row in rows.all()]


def test_the_loop_settles_a_job_stalled_too_long(server_factory, clean):
    """The server's loop runs the stalled-job watchdog: with jobs.reschedule_stalled, the job
    comes back for the next pilot. Each rule of the watchdogs: tests/db/test_watchdogs.py."""
    server = server_factory(JOBS__STALL_TIMEOUT_SECONDS="1", JOBS__STALLED_FAIL_SECONDS="1",
                            JOBS__LEASE_SWEEP_SECONDS="0.2", JOBS__RESCHEDULE_STALLED="true")  # fmt: skip
    with server.client() as api:
        job_id = _stall_one(api)
        assert wait_for(lambda: api.get(f"/jobs/{job_id}").json()["status"] == "Waiting", seconds=5)
        assert api.get(f"/jobs/{job_id}").json()["minor_status"] == "Stalled too long"
        assert api.post("/match", json={"Site": "S", "CPUTime": 10**6}).json()["job_id"] == job_id
    assert ("Waiting", "stall") in _events(clean, job_id)
