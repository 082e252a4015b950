"""The job lifecycle through the HTTP API (docs/explanation/jobs.md).

Waiting -> Matched -> Running -> Done | Failed; Matched -> Waiting (reschedule) | Failed;
Running -> Stalled -> Waiting | Failed | Running | Done; any non-final state -> Killed;
Running -> Running is the heartbeat. Everything else is a 409 that changes nothing.
A job is in tq_jobs exactly while it is Waiting; job_events records each transition once.
Also: listing with filters and cursor pagination, and bulk submission.
"""

from __future__ import annotations

import base64
import time
from datetime import datetime

import httpx
import pytest
import sqlalchemy as sa

from tests.problems import assert_problem

PILOT = {"Site": "S1", "CPUTime": 10**7, "PilotReference": "pilot-1"}


# --- helpers ---------------------------------------------------------------------------


def spec(**overrides) -> dict:
    return {"owner": "alice", "owner_group": "physics", **overrides}


def submit(client: httpx.Client, *specs: dict) -> list[int]:
    r = client.post("/jobs", json={"jobs": list(specs or [spec()])})
    assert r.status_code == 201, r.text
    return [j["job_id"] for j in r.json()["jobs"]]


def submit_one(client: httpx.Client, **overrides) -> int:
    return submit(client, spec(**overrides))[0]


def match(client: httpx.Client, job_id: int | None = None, **resource) -> dict:
    body = {**PILOT, **resource}
    if job_id is not None:
        body["JobID"] = job_id
    r = client.post("/match", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def report(client: httpx.Client, job_id: int, status: str, **extra) -> httpx.Response:
    return client.post(f"/jobs/{job_id}/status", json={"status": status, **extra})


def report_ok(client: httpx.Client, job_id: int, status: str, **extra) -> dict:
    r = report(client, job_id, status, **extra)
    assert r.status_code == 200, r.text
    assert r.json()["status"] == status
    return r.json()


def get_job(client: httpx.Client, job_id: int) -> dict:
    r = client.get(f"/jobs/{job_id}")
    assert r.status_code == 200, r.text
    return r.json()


def kill(client: httpx.Client, job_id: int) -> httpx.Response:
    return client.delete(f"/jobs/{job_id}")


def task_queues(client: httpx.Client) -> dict[int, dict]:
    r = client.get("/taskqueues")
    assert r.status_code == 200, r.text
    return {tq["task_queue_id"]: tq for tq in r.json()["task_queues"]}


def ts(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value.replace("Z", "+00:00"))


def events(database, job_id: int) -> list[str]:
    """The job's status history, oldest first, straight from job_events."""
    engine = database.engine()
    with engine.connect() as conn:
        rows = (
            conn.execute(sa.text("SELECT status FROM job_events WHERE job_id = :j ORDER BY id"), {"j": job_id})
            .scalars()
            .all()
        )
    engine.dispose()
    return list(rows)


def count_rows(database, table: str, where: str = "1=1", **params) -> int:
    engine = database.engine()
    with engine.connect() as conn:
        n = conn.execute(sa.text(f"SELECT count(*) FROM {table} WHERE {where}"), params).scalar_one()
    engine.dispose()
    return n


def delete_rows(database, table: str, where: str, **params) -> None:
    engine = database.engine()
    with engine.begin() as conn:
        conn.execute(sa.text(f"DELETE FROM {table} WHERE {where}"), params)
    engine.dispose()


def in_tq_jobs(database, job_id: int) -> bool:
    return count_rows(database, "tq_jobs", "job_id = :j", j=job_id) == 1


def job_in(client: httpx.Client, state: str) -> int:
    """A fresh job driven along legal transitions into `state`."""
    job_id = submit_one(client)
    if state == "Waiting":
        return job_id
    if state == "Killed":
        assert kill(client, job_id).status_code == 200
        return job_id
    match(client, job_id)
    if state == "Matched":
        return job_id
    report_ok(client, job_id, "Running")
    if state in ("Done", "Failed", "Stalled"):
        report_ok(client, job_id, state)
    return job_id


# --- the legal path --------------------------------------------------------------------


def test_submitted_job_is_waiting_in_its_task_queue(client, database):
    job_id = submit_one(client)
    job = get_job(client, job_id)
    assert job["status"] == "Waiting"
    assert job["task_queue_id"] in task_queues(client)
    assert task_queues(client)[job["task_queue_id"]]["jobs"] == 1
    assert in_tq_jobs(database, job_id)
    assert events(database, job_id) == ["Waiting"]


def test_match_makes_job_matched_with_site_pilot_and_lease_and_takes_it_out_of_the_queue(client, database):
    job_id = submit_one(client)
    answer = match(client)
    assert answer["job_id"] == job_id
    job = get_job(client, job_id)
    assert job["status"] == "Matched"
    assert job["site"] == "S1" and job["pilot_reference"] == "pilot-1"
    assert job["matched_at"] is not None and job["lease_expires_at"] is not None
    assert ts(job["lease_expires_at"]) > ts(job["matched_at"])
    assert not in_tq_jobs(database, job_id)
    assert [tq["jobs"] for tq in task_queues(client).values()] == [0]  # its last job went; the sweep deletes the TQ
    assert events(database, job_id) == ["Waiting", "Matched"]


def test_running_sets_started_at_and_ends_the_lease(client, database):
    job_id = job_in(client, "Matched")
    job = report_ok(client, job_id, "Running")
    assert job["started_at"] is not None
    assert job["heartbeat_at"] is not None
    assert job["lease_expires_at"] is None
    assert get_job(client, job_id) == job
    assert events(database, job_id) == ["Waiting", "Matched", "Running"]


def test_running_again_is_a_heartbeat_that_moves_heartbeat_at_without_an_event(client, database):
    job_id = job_in(client, "Running")
    first = get_job(client, job_id)
    time.sleep(0.02)
    r = report(client, job_id, "Running", cpu_seconds=12.5)
    assert r.status_code == 200, r.text
    beat = get_job(client, job_id)
    assert beat["status"] == "Running"
    assert ts(beat["heartbeat_at"]) > ts(first["heartbeat_at"])
    assert beat["started_at"] == first["started_at"]
    assert beat["cpu_seconds"] == 12.5
    assert events(database, job_id) == ["Waiting", "Matched", "Running"]


def test_done_records_cpu_and_wall_seconds_and_finished_at(client, database):
    job_id = job_in(client, "Running")
    job = report_ok(client, job_id, "Done", cpu_seconds=250.5, wall_seconds=280)
    assert job["cpu_seconds"] == 250.5
    assert job["wall_seconds"] == 280
    assert job["finished_at"] is not None
    assert ts(job["finished_at"]) >= ts(job["started_at"])
    assert get_job(client, job_id) == job
    assert events(database, job_id) == ["Waiting", "Matched", "Running", "Done"]


# --- the minor status follows the job ------------------------------------------------


def minor_statuses(client: httpx.Client, job_id: int) -> list[tuple[str, str | None]]:
    return [(e["status"], e["minor_status"]) for e in client.get(f"/jobs/{job_id}/history").json()["events"]]


@pytest.mark.parametrize("done", [{}, {"cpu_seconds": 1.0}], ids=["Done-alone", "Done-with-its-cpu"])
def test_a_change_of_status_sets_the_minor_status_it_states_or_none(client, done):
    """Assigned on the match only; a report without a minor status leaves none, a heartbeat
    with one sets it and one without keeps it. (On PostgreSQL a Done without its CPU is taken
    in a transaction, the others in one statement: both ways are covered.)"""
    job_id = submit_one(client)
    assert (match(client, job_id)["status"], get_job(client, job_id)["minor_status"]) == ("Matched", "Assigned")
    running = report_ok(client, job_id, "Running")
    assert running["minor_status"] is None and get_job(client, job_id)["minor_status"] is None
    assert report_ok(client, job_id, "Running", minor_status="Application")["minor_status"] == "Application"
    assert report_ok(client, job_id, "Running")["minor_status"] == "Application"  # the heartbeat keeps it
    finished = report_ok(client, job_id, "Done", **done)
    assert finished["minor_status"] is None and get_job(client, job_id)["minor_status"] is None
    assert minor_statuses(client, job_id) == [("Waiting", None), ("Matched", "Assigned"), ("Running", None),
                                              ("Done", None)]  # fmt: skip


@pytest.mark.parametrize("done", [{}, {"cpu_seconds": 1.0}], ids=["Done-alone", "Done-with-its-cpu"])
def test_the_minor_status_a_report_states_is_the_job_s(client, done):
    job_id = job_in(client, "Matched")
    assert report_ok(client, job_id, "Running", minor_status="Job Initialization")["minor_status"] == (
        "Job Initialization"
    )
    finished = report_ok(client, job_id, "Done", minor_status="Execution Complete", **done)
    assert finished["minor_status"] == "Execution Complete"
    assert minor_statuses(client, job_id)[2:] == [("Running", "Job Initialization"), ("Done", "Execution Complete")]


def test_a_kill_says_so_in_the_minor_status(client):
    job_id = job_in(client, "Running")
    report_ok(client, job_id, "Running", minor_status="Application")
    r = kill(client, job_id)
    assert r.status_code == 200, r.text
    assert (r.json()["status"], r.json()["minor_status"]) == ("Killed", "Marked for termination")
    assert minor_statuses(client, job_id)[-1] == ("Killed", "Marked for termination")


def test_hold_release_and_bulk_kill_set_their_minor_statuses(client):
    held, matched = submit_one(client), submit_one(client)
    match(client, matched)
    for action, ids, minor in (("hold", [held], "Put on hold"), ("release", [held], "Released from hold"),
                               ("kill", [held, matched], "Marked for termination")):  # fmt: skip
        r = client.post(f"/jobs/{action}", json={"filter": {"job_ids": ids}})
        assert r.status_code == 200 and r.json()["changed"] == len(ids), r.text
        assert [get_job(client, i)["minor_status"] for i in ids] == [minor] * len(ids)
    assert minor_statuses(client, held)[1:] == [("Held", "Put on hold"), ("Waiting", "Released from hold"),
                                                ("Killed", "Marked for termination")]  # fmt: skip


@pytest.mark.parametrize(
    "path",
    [["Running", "Failed"], ["Running", "Stalled", "Failed"]],
    ids=["Running->Failed", "Stalled->Failed"],
)
def test_failed_is_final_and_sets_finished_at(client, database, path):
    job_id = job_in(client, "Matched")
    for status in path:
        job = report_ok(client, job_id, status, minor_status=f"now {status}")
    assert job["finished_at"] is not None
    assert job["minor_status"] == "now Failed"
    assert not in_tq_jobs(database, job_id)
    assert events(database, job_id) == ["Waiting", "Matched", *path]
    assert_problem(report(client, job_id, "Running"), 409)


def test_stalled_job_rescheduled_is_back_in_a_task_queue_and_can_be_matched_again(client, database):
    job_id = job_in(client, "Stalled")
    assert get_job(client, job_id)["finished_at"] is None
    job = report_ok(client, job_id, "Waiting")
    assert job["site"] is None and job["pilot_reference"] is None and job["started_at"] is None
    tqs = task_queues(client)
    assert list(tqs) == [job["task_queue_id"]]
    assert tqs[job["task_queue_id"]]["jobs"] == 1
    assert in_tq_jobs(database, job_id)
    again = match(client, PilotReference="pilot-2", Site="S2")
    assert again["job_id"] == job_id
    assert get_job(client, job_id)["pilot_reference"] == "pilot-2"
    assert events(database, job_id) == ["Waiting", "Matched", "Running", "Stalled", "Waiting", "Matched"]


def test_reschedule_of_matched_job_recreates_its_deleted_task_queue_and_clears_site(client, database):
    job_id = submit_one(client, sites=["S1", "S2"], tags=["GPU"])
    emptied = match(client, Tag=["GPU"])["task_queue_id"]
    delete_rows(database, "task_queues", "id = :t", t=emptied)  # as the sweep does, once it has been empty a while
    assert task_queues(client) == {}
    job = report_ok(client, job_id, "Waiting", minor_status="rescheduled")
    assert job["site"] is None and job["pilot_reference"] is None
    assert job["matched_at"] is None and job["lease_expires_at"] is None
    assert job["minor_status"] == "rescheduled"
    tqs = task_queues(client)
    assert list(tqs) == [job["task_queue_id"]]
    tq = tqs[job["task_queue_id"]]
    assert tq["jobs"] == 1 and tq["sites"] == ["S1", "S2"] and tq["tags"] == ["GPU"]
    assert count_rows(database, "task_queues") == 1
    assert in_tq_jobs(database, job_id)
    assert events(database, job_id) == ["Waiting", "Matched", "Waiting"]


def test_reschedule_rejoins_the_task_queue_that_still_holds_its_siblings(client, database):
    first, _second = submit(client, spec(), spec())
    tq_id = get_job(client, first)["task_queue_id"]
    match(client, first)
    assert task_queues(client)[tq_id]["jobs"] == 1
    job = report_ok(client, first, "Waiting")
    assert job["task_queue_id"] == tq_id
    assert task_queues(client)[tq_id]["jobs"] == 2


def test_each_transition_is_recorded_once_in_job_events(client, database):
    job_id = submit_one(client)
    match(client, job_id)
    report_ok(client, job_id, "Running")
    for _ in range(3):
        report_ok(client, job_id, "Running")  # heartbeats
    report_ok(client, job_id, "Stalled")
    report_ok(client, job_id, "Waiting")
    match(client, job_id)
    report_ok(client, job_id, "Running")
    report_ok(client, job_id, "Done", cpu_seconds=1)
    assert_problem(report(client, job_id, "Done"), 409)
    assert events(database, job_id) == [
        "Waiting", "Matched", "Running", "Stalled", "Waiting", "Matched", "Running", "Done",
    ]  # fmt: skip


# --- what a pilot may do with the job it was handed -------------------------------------


def test_a_pilot_may_fail_a_matched_job_it_could_not_start(client, database):
    job_id = job_in(client, "Matched")
    job = report_ok(client, job_id, "Failed", minor_status="Input data not available")
    assert job["minor_status"] == "Input data not available"
    assert job["finished_at"] is not None and job["lease_expires_at"] is None
    assert job["started_at"] is None  # it never ran
    assert job["cpu_seconds"] is None and job["wall_seconds"] is None
    assert not in_tq_jobs(database, job_id)
    assert events(database, job_id) == ["Waiting", "Matched", "Failed"]
    assert count_rows(database, "job_events", "job_id = :j AND minor_status = :m", j=job_id,
                      m="Input data not available") == 1  # fmt: skip
    assert count_rows(database, "usage_charges") == 0  # no CPU reported, none charged
    assert_problem(report(client, job_id, "Running"), 409)  # final


def test_a_report_of_more_time_than_physics_allows_is_a_422_that_changes_nothing(client, database):
    """The wall time at most the time since the match plus jobs.clock_skew_seconds (300), the CPU
    at most the wall time × the job's processors × 1.05; a report beyond either changes nothing."""
    job_id = job_in(client, "Running")
    cases = [({"wall_seconds": 10**6, "cpu_seconds": 100}, "wall_seconds"),
             ({"wall_seconds": 200, "cpu_seconds": 10**12}, "cpu_seconds"),
             ({"cpu_seconds": 10**12}, "cpu_seconds")]  # fmt: skip
    for used, field in cases:
        for status in ("Running", "Done"):
            problem = assert_problem(report(client, job_id, status, **used), 422)
            (error,) = problem["errors"]
            assert error["loc"] == ["body", field] and field in problem["detail"]
    assert problem["errors"][0]["ctx"]["bound"] <= (300 + 60) * 1.05  # the time since the match, and the skew
    assert (
        "jobs.clock_skew_seconds" in assert_problem(report(client, job_id, "Done", wall_seconds=10**6), 422)["detail"]
    )
    job = get_job(client, job_id)
    assert (job["status"], job["cpu_seconds"], job["wall_seconds"]) == ("Running", None, None)
    assert count_rows(database, "usage_charges") == 0
    assert events(database, job_id) == ["Waiting", "Matched", "Running"]
    report_ok(client, job_id, "Done", cpu_seconds=200 * 1.05, wall_seconds=200)  # within both bounds


def test_a_job_of_several_processors_may_report_their_cpu_time(client, database):
    job_id = submit_one(client, tags=["MultiProcessor", "8Processors"])
    match(client, job_id, NumberOfProcessors=8)
    report_ok(client, job_id, "Running", cpu_seconds=8 * 100, wall_seconds=100)  # eight cores busy
    problem = assert_problem(report(client, job_id, "Done", cpu_seconds=9 * 200, wall_seconds=200), 422)
    assert problem["errors"][0]["loc"] == ["body", "cpu_seconds"] and problem["errors"][0]["ctx"]["bound"] == 1680
    report_ok(client, job_id, "Done", cpu_seconds=8 * 200, wall_seconds=200)
    assert count_rows(database, "usage_charges", "job_id = :j", j=job_id) == 1


def test_a_matched_job_failed_with_cpu_seconds_is_charged_what_was_reported(client, database):
    job_id = job_in(client, "Matched")
    job = report_ok(client, job_id, "Failed", cpu_seconds=12.5, wall_seconds=20)
    assert (job["cpu_seconds"], job["wall_seconds"]) == (12.5, 20)
    assert job["started_at"] is None and job["lease_expires_at"] is None
    assert count_rows(database, "usage_charges", "job_id = :j", j=job_id) == 1


def test_a_matched_job_failed_by_its_pilot_frees_its_slot_at_the_site(client):
    r = client.put("/limits", json={"limits": [
        {"site": "S1", "attribute": "owner_group", "value": "physics", "running_limit": 1}]})  # fmt: skip
    assert r.status_code == 200, r.text
    both = set(submit(client, spec(), spec()))
    first = match(client)["job_id"]
    assert client.post("/match", json=PILOT).status_code == 204  # the one slot is taken
    report_ok(client, first, "Failed", minor_status="could not start")
    assert match(client)["job_id"] == (both - {first}).pop()


def test_a_pilot_handing_its_job_back_counts_up_to_max_reschedules(as_role, database):
    """Each return to Waiting the pilot asks for counts; the one past jobs.max_reschedules (3)
    fails the job, as a lapsed lease or a stalled job would."""
    admin, pilot = as_role("admin"), as_role("pilot", "p1")
    job_id = submit_one(admin)
    for counted in (1, 2, 3):
        assert match(pilot)["job_id"] == job_id
        job = report_ok(pilot, job_id, "Waiting", minor_status="pilot gave up")
        assert job["reschedules"] == counted and job["minor_status"] == "pilot gave up"
        assert in_tq_jobs(database, job_id)
    assert match(pilot)["job_id"] == job_id
    r = report(pilot, job_id, "Waiting")
    assert r.status_code == 200, r.text
    job = r.json()
    assert job["status"] == "Failed" and job["minor_status"] == "Maximum of reschedulings reached"
    assert job["reschedules"] == 3 and job["finished_at"] is not None
    assert not in_tq_jobs(database, job_id)
    assert events(database, job_id)[-2:] == ["Matched", "Failed"]


@pytest.mark.parametrize("role", ["admin", "operator"])
def test_an_operators_or_admins_own_reschedule_is_not_counted(as_role, database, role):
    admin, pilot, own = as_role("admin"), as_role("pilot", "p1"), as_role(role)
    job_id = submit_one(admin)
    for _ in range(4):  # one more than jobs.max_reschedules
        assert match(pilot)["job_id"] == job_id
        job = report_ok(own, job_id, "Waiting", minor_status="rescheduled by hand")
        assert job["reschedules"] == 0
    report_ok(pilot, match(pilot)["job_id"], "Running")
    report_ok(own, job_id, "Stalled")
    assert report_ok(own, job_id, "Waiting")["reschedules"] == 0


# --- every other transition is refused -------------------------------------------------

STATES = ["Waiting", "Matched", "Running", "Stalled", "Done", "Failed", "Killed"]
REPORTABLE = ["Running", "Done", "Failed", "Stalled", "Waiting"]
LEGAL = {
    ("Matched", "Running"),
    ("Matched", "Waiting"),
    ("Matched", "Failed"),  # its pilot could not start it
    ("Running", "Running"),
    ("Running", "Done"),
    ("Running", "Failed"),
    ("Running", "Stalled"),
    ("Stalled", "Waiting"),
    ("Stalled", "Failed"),
    ("Stalled", "Running"),  # its pilot was only late
    ("Stalled", "Done"),
}
ILLEGAL = [(a, b) for a in STATES for b in REPORTABLE if (a, b) not in LEGAL]


@pytest.mark.parametrize(("current", "requested"), ILLEGAL, ids=[f"{a}->{b}" for a, b in ILLEGAL])
def test_illegal_transition_is_409_problem_and_leaves_the_job_unchanged(client, database, current, requested):
    job_id = job_in(client, current)
    before, history, queues = get_job(client, job_id), events(database, job_id), task_queues(client)
    assert before["status"] == current
    assert_problem(report(client, job_id, requested, cpu_seconds=7, minor_status="x"), 409)
    assert get_job(client, job_id) == before
    assert events(database, job_id) == history
    assert task_queues(client) == queues
    assert in_tq_jobs(database, job_id) == (current == "Waiting")


# --- kill -----------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["Waiting", "Matched", "Running", "Stalled"])
def test_delete_kills_a_job_in_any_non_final_state(client, database, state):
    job_id = job_in(client, state)
    r = kill(client, job_id)
    assert r.status_code == 200, r.text
    job = r.json()
    assert job["status"] == "Killed" and job["finished_at"] is not None
    assert get_job(client, job_id) == job
    assert not in_tq_jobs(database, job_id)
    assert events(database, job_id)[-1] == "Killed"
    assert events(database, job_id).count("Killed") == 1


def test_killing_the_last_waiting_job_deletes_its_task_queue(client, database):
    job_id = submit_one(client)
    assert len(task_queues(client)) == 1
    assert kill(client, job_id).status_code == 200
    assert task_queues(client) == {}
    assert count_rows(database, "task_queues") == 0
    assert client.post("/match", json=PILOT).status_code == 204


def test_killing_one_waiting_job_keeps_the_task_queue_for_the_others(client, database):
    doomed, kept = submit(client, spec(), spec())
    tq_id = get_job(client, kept)["task_queue_id"]
    assert kill(client, doomed).status_code == 200
    assert task_queues(client)[tq_id]["jobs"] == 1
    assert match(client)["job_id"] == kept


@pytest.mark.parametrize("state", ["Done", "Failed", "Killed"])
def test_killing_a_finished_job_is_409_and_changes_nothing(client, database, state):
    job_id = job_in(client, state)
    before, history = get_job(client, job_id), events(database, job_id)
    assert_problem(kill(client, job_id), 409)
    assert get_job(client, job_id) == before
    assert events(database, job_id) == history


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/jobs/{id}", None),
        ("DELETE", "/jobs/{id}", None),
        ("POST", "/jobs/{id}/status", {"status": "Running"}),
        ("POST", "/jobs/{id}/status", {"status": "Waiting"}),
        ("POST", "/jobs/{id}/status", {"status": "Done", "cpu_seconds": 1}),
    ],
    ids=["get", "delete", "status-running", "status-waiting", "status-done"],
)
def test_unknown_job_is_404_problem(client, method, path, body):
    known = submit_one(client)
    r = client.request(method, path.format(id=known + 1000), json=body)
    assert_problem(r, 404)


# --- listing --------------------------------------------------------------------------


def list_all(client: httpx.Client, limit: int, **filters) -> list[list[int]]:
    """Follow next_cursor to the end; the job ids of each page."""
    pages, cursor = [], None
    while True:
        params = {"limit": limit, **filters, **({"after": cursor} if cursor else {})}
        r = client.get("/jobs", params=params)
        assert r.status_code == 200, r.text
        pages.append([j["job_id"] for j in r.json()["jobs"]])
        cursor = r.json()["next_cursor"]
        if cursor is None:
            return pages
        assert len(pages) < 100, "pagination does not end"


@pytest.mark.parametrize(("total", "sizes"), [(25, [10, 10, 5]), (20, [10, 10]), (3, [3])])
def test_cursor_pagination_covers_every_job_once_in_id_order(client, total, sizes):
    ids = submit(client, *[spec(payload={"n": i}) for i in range(total)])
    pages = list_all(client, limit=10)
    assert [len(p) for p in pages] == sizes
    flat = [j for p in pages for j in p]
    assert flat == sorted(ids)
    assert len(set(flat)) == total


@pytest.mark.parametrize(("total", "sizes"), [(25, [10, 10, 5]), (3, [3])])
def test_newest_first_pages_cover_every_job_once_in_reverse_id_order(client, total, sizes):
    ids = submit(client, *[spec(payload={"n": i}) for i in range(total)])
    pages = list_all(client, limit=10, order="newest")
    assert [len(p) for p in pages] == sizes
    assert [j for p in pages for j in p] == sorted(ids, reverse=True)


def test_a_cursor_continues_only_the_order_that_gave_it(client):
    submit(client, *[spec(payload={"n": i}) for i in range(3)])
    newest = client.get("/jobs", params={"limit": 1, "order": "newest"}).json()["next_cursor"]
    oldest = client.get("/jobs", params={"limit": 1}).json()["next_cursor"]
    r = client.get("/jobs", params={"after": newest})
    assert_problem(r, 400)
    assert "order=newest" in r.json()["detail"]
    assert_problem(client.get("/jobs", params={"after": oldest, "order": "newest"}), 400)
    assert_problem(client.get("/jobs", params={"order": "latest"}), 422)


def test_empty_listing_has_no_next_cursor(client):
    r = client.get("/jobs")
    assert r.status_code == 200
    assert r.json() == {"jobs": [], "next_cursor": None}


def test_listing_filters_by_status_owner_and_group(client):
    specs = [
        spec(owner=owner, owner_group=group)
        for owner in ("alice", "bob")
        for group in ("physics", "chemistry")
        for _ in range(3)
    ]
    ids = submit(client, *specs)
    by = dict(zip(ids, specs))
    matched = match(client, ids[0])["job_id"]
    killed = ids[-1]
    assert kill(client, killed).status_code == 200

    def expect(predicate) -> list[int]:
        return [j for j in ids if predicate(j)]

    def status_of(j):
        return "Matched" if j == matched else "Killed" if j == killed else "Waiting"

    cases = {
        "owner=alice": ({"owner": "alice"}, expect(lambda j: by[j]["owner"] == "alice")),
        "group=chemistry": (
            {"owner_group": "chemistry"},
            expect(lambda j: by[j]["owner_group"] == "chemistry"),
        ),
        "bob+physics": (
            {"owner": "bob", "owner_group": "physics"},
            expect(lambda j: by[j]["owner"] == "bob" and by[j]["owner_group"] == "physics"),
        ),
        "Waiting": ({"status": "Waiting"}, expect(lambda j: status_of(j) == "Waiting")),
        "Matched": ({"status": "Matched"}, [matched]),
        "Killed+bob": ({"status": "Killed", "owner": "bob"}, [killed]),
        "Done": ({"status": "Done"}, []),
        "nobody": ({"owner": "carol"}, []),
    }
    for name, (filters, expected) in cases.items():
        for limit in (2, 1000):  # paged and in one go
            got = [j for p in list_all(client, limit, **filters) for j in p]
            assert got == expected, (name, limit)
    r = client.get("/jobs", params={"status": "Waiting", "owner": "alice", "limit": 1000})
    assert all(j["status"] == "Waiting" and j["owner"] == "alice" for j in r.json()["jobs"])


def test_listing_filters_by_account_site_queue_states_and_submission_time(client):
    early = submit(client, spec(account="grid"), spec(owner="bob", sites=["S2"]))  # submitted together
    time.sleep(0.01)
    early += submit(client, spec(owner="carol"))
    cut = client.get(f"/jobs/{early[-1]}").json()["submitted_at"]
    time.sleep(0.01)
    late = submit(client, spec(owner="dave", cpu_time=99))
    at_s1 = match(client, early[0])["job_id"]
    at_s2 = match(client, early[1], Site="S2")["job_id"]
    assert kill(client, early[2]).status_code == 200
    queue = client.get(f"/jobs/{late[0]}").json()["task_queue_id"]
    first = datetime.fromisoformat(client.get(f"/jobs/{early[0]}").json()["submitted_at"])
    cases = {
        "account": ({"account": "grid"}, [at_s1]),
        "account by default the group": ({"account": "physics"}, [at_s2, early[2], *late]),
        "site": ({"site": "S2"}, [at_s2]),
        "task queue": ({"task_queue_id": queue}, late),
        "two states": ({"status": ["Matched", "Killed"]}, [at_s1, at_s2, early[2]]),
        "a state and an owner": ({"status": ["Matched", "Waiting"], "owner": "dave"}, late),
        "since": ({"since": cut}, [early[2], *late]),
        "until": ({"until": cut}, early[:2]),
        "a window": ({"since": first.isoformat(), "until": cut}, early[:2]),
    }
    for name, (filters, expected) in cases.items():
        got = [j for p in list_all(client, 1, **filters) for j in p]
        assert got == expected, (name, got)


def test_listing_continues_with_the_former_cursor_name(client):
    ids = submit(client, spec(), spec())
    first = client.get("/jobs", params={"limit": 1}).json()
    assert first["jobs"][0]["job_id"] == ids[0]
    rest = client.get("/jobs", params={"limit": 1, "cursor": first["next_cursor"]}).json()
    assert [j["job_id"] for j in rest["jobs"]] == ids[1:]


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"sites": "S1"}, "sites"),  # a mistyped filter must not list every job
        ({"owner": "alice", "group": "physics"}, "group"),
        ({"status": "Sleeping"}, "status"),
        ({"since": "2026-01-01T00:00:00"}, "since"),  # a time without its zone
        ({"until": "2026-01-01T00:00:00" + "0" * 60 + "Z"}, "at most 64 characters"),
        ({"since": "2026-02-01T00:00:00Z", "until": "2026-01-01T00:00:00Z"}, "must be before until"),
        ({"task_queue_id": "0"}, "task_queue_id"),
    ],
)
def test_a_listing_parameter_it_does_not_take_is_a_422_naming_it(client, params, named):
    submit_one(client)
    r = client.get("/jobs", params=params)
    assert_problem(r, 422)
    assert named in r.text


@pytest.mark.parametrize(
    "cursor",
    [
        "garbage",
        "!!!!",
        base64.urlsafe_b64encode(b"before:5").decode(),
        base64.urlsafe_b64encode(b"after:-1").decode(),
        base64.urlsafe_b64encode(b"after:x").decode(),
        base64.urlsafe_b64encode(b"\xff\xfe\xfd").decode(),
    ],
)
def test_garbage_cursor_is_400_problem(client, cursor):
    submit_one(client)
    assert_problem(client.get("/jobs", params={"cursor": cursor}), 400)


# --- bulk submission ------------------------------------------------------------------


def test_bulk_submission_of_10000_jobs_returns_distinct_ids_in_request_order(client, database):
    specs = [spec(payload=i) for i in range(10_000)]
    r = client.post("/jobs", json={"jobs": specs}, timeout=120)
    assert r.status_code == 201, r.text[:500]
    answer = r.json()["jobs"]
    ids = [j["job_id"] for j in answer]
    assert len(ids) == 10_000 and len(set(ids)) == 10_000
    assert all(j["status"] == "Waiting" for j in answer)
    assert len({j["task_queue_id"] for j in answer}) == 1
    # in order: the i-th id names the job whose payload is i
    engine = database.engine()
    with engine.connect() as conn:
        payload_of = dict(conn.execute(sa.text("SELECT job_id, payload FROM job_specs")).all())
    engine.dispose()
    payload_of = {k: (v if isinstance(v, int) else int(v)) for k, v in payload_of.items()}
    assert [payload_of[j] for j in ids] == list(range(10_000))
    assert count_rows(database, "tq_jobs") == 10_000
    assert count_rows(database, "job_events") == 10_000
    assert next(iter(task_queues(client).values()))["jobs"] == 10_000


def test_identical_requirements_share_one_task_queue_and_different_ones_do_not(client):
    r = client.post(
        "/jobs",
        json={"jobs": [spec(sites=["S1"]), spec(owner="bob"), spec(sites=["S1"]), spec(), spec(owner="bob")]},
    )
    assert r.status_code == 201, r.text
    tq = [j["task_queue_id"] for j in r.json()["jobs"]]
    assert tq[0] == tq[2] and tq[1] == tq[4]
    assert len({tq[0], tq[1], tq[3]}) == 3
    # a later submission finds the same queues
    later = client.post("/jobs", json={"jobs": [spec(), spec(sites="S1")]}).json()["jobs"]
    assert [j["task_queue_id"] for j in later] == [tq[3], tq[0]]
    assert {t: q["jobs"] for t, q in task_queues(client).items()} == {tq[0]: 3, tq[1]: 2, tq[3]: 2}


SAME_QUEUE = {
    "sets are sorted and de-duplicated": ({"sites": ["B", "A", "A"]}, {"sites": ["A", "B"]}),
    "tags as a set": ({"tags": ["GPU", "8GB", "GPU"]}, {"tags": ["8GB", "GPU"]}),
    "one string is a one-element list": ({"platforms": "EL9"}, {"platforms": ["EL9"]}),
    "cpu_time is bucketed": ({"cpu_time": 100}, {"cpu_time": 360}),
    "default vo": ({}, {"vo": "default"}),
    "site any is no restriction": ({"sites": ["ANY"]}, {}),
}

DIFFERENT_QUEUE = {
    "owner": ({"owner": "alice"}, {"owner": "bob"}),
    "owner_group": ({"owner_group": "physics"}, {"owner_group": "chemistry"}),
    "vo": ({"vo": "lhcb"}, {"vo": "atlas"}),
    "cpu bucket": ({"cpu_time": 360}, {"cpu_time": 361}),
    "priority_class": ({"priority_class": 0}, {"priority_class": -1}),
    "sites": ({"sites": ["A"]}, {"sites": ["A", "B"]}),
    "banned_sites": ({"banned_sites": ["A"]}, {}),
    "grid_ces": ({"grid_ces": ["ce1"]}, {"grid_ces": ["ce2"]}),
    "job_types": ({"job_types": ["User"]}, {"job_types": ["MCSimulation"]}),
    "tags": ({"tags": ["GPU"]}, {}),
    "site vs banned site": ({"sites": ["A"]}, {"banned_sites": ["A"]}),
}


@pytest.mark.parametrize(("a", "b"), list(SAME_QUEUE.values()), ids=list(SAME_QUEUE))
def test_equivalent_requirements_are_normalised_into_one_task_queue(client, a, b):
    r = client.post("/jobs", json={"jobs": [spec(**a), spec(**b)]})
    assert r.status_code == 201, r.text
    first, second = (j["task_queue_id"] for j in r.json()["jobs"])
    assert first == second
    assert len(task_queues(client)) == 1


@pytest.mark.parametrize(("a", "b"), list(DIFFERENT_QUEUE.values()), ids=list(DIFFERENT_QUEUE))
def test_different_requirements_get_different_task_queues(client, a, b):
    r = client.post("/jobs", json={"jobs": [spec(**a), spec(**b)]})
    assert r.status_code == 201, r.text
    first, second = (j["task_queue_id"] for j in r.json()["jobs"])
    assert first != second
    assert len(task_queues(client)) == 2


def assert_nothing_stored(database) -> None:
    for table in ("jobs", "tq_jobs", "task_queues", "job_events"):
        assert count_rows(database, table) == 0, table


@pytest.mark.parametrize(
    "bad",
    [
        {"user_priority": 11},
        {"owner": ""},
        {"sites": ["ok", ""]},
        {"payload": "x" * 70_000},  # checked after parsing, against the configured limit
    ],
    ids=["user_priority", "owner", "site", "payload-size"],
)
def test_batch_with_one_invalid_job_is_422_and_stores_nothing(client, database, bad):
    r = client.post("/jobs", json={"jobs": [spec(sites=["S1"]), spec(owner="bob"), spec(**bad)]})
    body = assert_problem(r, 422)
    assert any(e["loc"][:3] == ["body", "jobs", 2] for e in body["errors"]), body["errors"]
    assert_nothing_stored(database)
    assert client.get("/jobs").json()["jobs"] == []


def test_more_than_10000_jobs_in_one_request_is_422_and_stores_nothing(client, database):
    r = client.post("/jobs", json={"jobs": [spec()] * 10_001}, timeout=120)
    body = assert_problem(r, 422)
    assert any(e["loc"][:2] == ["body", "jobs"] for e in body["errors"])
    assert_nothing_stored(database)


# --- ids are never reused ---------------------------------------------------------------


def test_a_deleted_queues_id_is_never_reused_and_a_replay_names_the_queue_matched_from(client, database):
    """A queue that empties is deleted by the sweep; the next new queue must get a new id
    (SQLite gave the same one), so that replaying a match names the queue the job came from."""
    pilot = {"Site": "S1", "CPUTime": 10**6, "request_id": "pilot-1-try-1"}
    [job_id] = submit(client, spec(owner="alice", owner_group="g", sites=["S1"]))
    [first_tq] = [tq["task_queue_id"] for tq in client.get("/taskqueues").json()["task_queues"]]
    matched = match(client, **pilot)
    assert (matched["job_id"], matched["task_queue_id"]) == (job_id, first_tq)
    report_ok(client, job_id, "Running")
    report_ok(client, job_id, "Done", cpu_seconds=5)
    delete_rows(database, "task_queues", "id = :t", t=first_tq)  # emptied, then swept
    assert client.get("/taskqueues").json()["task_queues"] == []
    r = client.post("/jobs", json={"jobs": [spec(owner="bob", owner_group="h", sites=["S1"])]})
    second_tq = r.json()["jobs"][0]["task_queue_id"]
    assert second_tq != first_tq
    replay = match(client, **pilot)
    assert (replay["job_id"], replay["status"], replay["task_queue_id"]) == (job_id, "Done", first_tq)
    # and a new job never takes an old job's id either
    newest = client.post("/jobs", json={"jobs": [spec(owner="carol", owner_group="g")]}).json()["jobs"][0]
    assert newest["job_id"] > r.json()["jobs"][0]["job_id"] > job_id


# --- the owner's own reschedule ---------------------------------------------------------


def reschedule(client: httpx.Client, job_id: int) -> httpx.Response:
    return client.post(f"/jobs/{job_id}/reschedule")


def test_an_owner_reschedules_its_own_jobs_without_counting_them(as_role, database):
    """POST /jobs/{id}/reschedule, DIRAC's dirac-wms-job-reschedule: the owner's own
    reschedules never count, so they never fail the job at jobs.max_reschedules (3)."""
    alice = as_role("user", "alice", groups=["g"])
    pilot = as_role("pilot", "p1")
    job_id = submit_one(alice, owner="alice", owner_group="g")
    for _ in range(4):
        assert match(pilot)["job_id"] == job_id
        r = reschedule(alice, job_id)
        assert r.status_code == 200, r.text
        job = r.json()
        assert (job["status"], job["reschedules"], job["minor_status"]) == ("Waiting", 0, "rescheduled by its owner")
        assert in_tq_jobs(database, job_id)
    assert events(database, job_id)[-2:] == ["Matched", "Waiting"]
    with database.engine().connect() as conn:
        sources = conn.execute(
            sa.text("SELECT source FROM job_events WHERE job_id = :j AND status = 'Waiting' ORDER BY id"), {"j": job_id}
        ).scalars()
        assert list(sources)[1:] == ["reschedule"] * 4


def test_a_reschedule_takes_a_stalled_job_back_and_refuses_the_others(as_role, database):
    admin, pilot = as_role("admin"), as_role("pilot", "p1")
    job_id = submit_one(admin)
    assert_problem(reschedule(admin, job_id), 409)  # Waiting already
    report_ok(pilot, match(pilot)["job_id"], "Running")
    assert_problem(reschedule(admin, job_id), 409)  # its pilot runs it
    report_ok(pilot, job_id, "Stalled")
    assert reschedule(admin, job_id).json()["status"] == "Waiting"
    report_ok(pilot, match(pilot)["job_id"], "Running")
    report_ok(pilot, job_id, "Done", cpu_seconds=1)
    assert_problem(reschedule(admin, job_id), 409)


def test_only_the_owner_and_privileged_callers_may_reschedule(as_role):
    admin, pilot = as_role("admin"), as_role("pilot", "p1")
    job_id = submit_one(admin, owner="alice", owner_group="g")
    match(pilot)
    assert_problem(reschedule(as_role("user", "bob", groups=["g"]), job_id), 404)  # not bob's job
    assert_problem(reschedule(pilot, job_id), 403)
    assert_problem(reschedule(admin, 2**62), 404)
    assert reschedule(as_role("operator"), job_id).json()["reschedules"] == 0


def test_a_job_s_history_says_what_happened_and_who_did_it(as_role):
    """GET /jobs/{id}/history: every event oldest first with its source and actor; users see
    their own jobs' history only."""
    alice, bob = as_role("user", "alice", groups=["g"]), as_role("user", "bob", groups=["g"])
    pilot, operator = as_role("pilot", "p1"), as_role("operator", "op-ann")
    job_id = submit_one(alice, owner="alice", owner_group="g")
    assert match(pilot)["job_id"] == job_id
    report_ok(pilot, job_id, "Running")
    report_ok(pilot, job_id, "Stalled")
    assert operator.post(f"/jobs/{job_id}/reschedule").status_code == 200
    assert alice.patch(f"/jobs/{job_id}", json={"user_priority": 3}).status_code == 200
    assert alice.delete(f"/jobs/{job_id}").status_code == 200
    r = alice.get(f"/jobs/{job_id}/history")
    assert r.status_code == 200, r.text
    history = r.json()
    assert history["job_id"] == job_id
    steps = [(e["status"], e["source"], e["by"]) for e in history["events"]]
    assert steps == [("Waiting", "submit", "alice"), ("Matched", "match", "p1"), ("Running", "api", "p1"),
                     ("Stalled", "api", "p1"), ("Waiting", "reschedule", "op-ann"), ("Waiting", "priority", "alice"),
                     ("Killed", "kill", "alice")]  # fmt: skip
    times = [datetime.fromisoformat(e["at"]) for e in history["events"]]
    assert times == sorted(times) and all(t.tzinfo is not None for t in times)
    assert history["events"][1]["minor_status"] == "Assigned"
    assert operator.get(f"/jobs/{job_id}/history").json() == history
    assert_problem(bob.get(f"/jobs/{job_id}/history"), 404)  # another user's job is out of sight
    assert_problem(alice.get("/jobs/999999999/history"), 404)


def test_the_service_s_own_returns_are_by_system(server_factory, clean):
    """A lapsed lease puts the job back by the service's own hand."""
    server = server_factory(JOBS__MATCHED_LEASE_SECONDS="1", JOBS__LEASE_SWEEP_SECONDS="0.2")
    with server.client() as api:
        job_id = submit_one(api)
        match(api, job_id)
        deadline = time.monotonic() + 20
        while (events_now := api.get(f"/jobs/{job_id}/history").json()["events"])[-1]["source"] != "lease":
            assert time.monotonic() < deadline, events_now
            time.sleep(0.2)
    assert (events_now[-1]["status"], events_now[-1]["by"]) == ("Waiting", "system")
