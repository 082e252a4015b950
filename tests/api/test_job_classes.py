"""Job classes and priority classes through the HTTP API: /job-classes, their
use at submission, and PATCH /jobs/{id} moving waiting jobs between task queues."""

from __future__ import annotations

import random
import threading
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from tests.api.test_concurrency import assert_queue_invariants, query, run_together
from tests.problems import assert_problem

ANYWHERE = {"Site": "S1", "CPUTime": 10**6}

DEFAULTS = {"default_class": 0, "max_class": 0, "allowed_users": [], "allowed_groups": [],
            "priority": 0, "description": None}  # fmt: skip


def put_class(api: httpx.Client, name: str, **body: Any) -> httpx.Response:
    return api.put(f"/job-classes/{quote(name, safe='')}", json=body)


def submit(api: httpx.Client, *specs: dict) -> httpx.Response:
    return api.post("/jobs", json={"jobs": [{"owner": "alice", "owner_group": "g1", **s} for s in specs]})


def submit_ids(api: httpx.Client, *specs: dict) -> list[int]:
    r = submit(api, *specs)
    assert r.status_code == 201, r.text
    return [j["job_id"] for j in r.json()["jobs"]]


def job(api: httpx.Client, job_id: int) -> dict:
    r = api.get(f"/jobs/{job_id}")
    assert r.status_code == 200, r.text
    return r.json()


def patch(api: httpx.Client, job_id: int, **body: Any) -> httpx.Response:
    return api.patch(f"/jobs/{job_id}", json=body)


def task_queues(api: httpx.Client) -> dict[int, dict]:
    return {tq["task_queue_id"]: tq for tq in api.get("/taskqueues").json()["task_queues"]}


def count(db, sql: str) -> int:
    with db.engine().connect() as conn:
        return conn.exec_driver_sql(sql).scalar()


def match_id(api: httpx.Client) -> int:
    r = api.post("/match", json=ANYWHERE)
    assert r.status_code == 200, r.text
    return r.json()["job_id"]


# --- /job-classes: create, read, replace, list, validation -----------------------------------


def test_put_creates_with_defaults_then_replaces(client):
    r = put_class(client, "short")
    assert r.status_code == 201, r.text
    assert r.json() == {"name": "short", **DEFAULTS}
    r = put_class(client, "short", default_class=-5, max_class=3, allowed_users=["bob", "alice", "bob"],
                  allowed_groups=["g2", "g1"], priority=700, description="short jobs")  # fmt: skip
    assert r.status_code == 200, r.text
    assert r.json() == {"name": "short", "default_class": -5, "max_class": 3, "allowed_users": ["alice", "bob"],
                        "allowed_groups": ["g1", "g2"], "priority": 700, "description": "short jobs"}  # fmt: skip
    assert client.get("/job-classes/short").json() == r.json()
    # the body is the whole definition: omitted fields return to their defaults
    assert put_class(client, "short").json() == {"name": "short", **DEFAULTS}


def test_list_is_sorted_by_name_and_unknown_is_404(client):
    assert client.get("/job-classes").json() == {"job_classes": []}
    for name in ("zeta", "alpha", "Mid"):
        put_class(client, name)
    assert [c["name"] for c in client.get("/job-classes").json()["job_classes"]] == ["Mid", "alpha", "zeta"]
    assert_problem(client.get("/job-classes/nope"), 404)


def test_any_name_a_job_may_give_is_addressable(client):
    """Percent-encoded slashes, quotes and unicode: a class named like that can be defined and used."""
    name = "/* */ -- # Zürich's ☢"
    assert put_class(client, name).status_code == 201
    assert client.get(f"/job-classes/{quote(name, safe='')}").json()["name"] == name
    [job_id] = submit_ids(client, {"job_class": name})
    assert job(client, job_id)["job_class"] == name


@pytest.mark.parametrize(
    "body",
    [
        {"default_class": 1, "max_class": 0},
        {"default_class": -1024},
        {"max_class": 1025},
        {"default_class": 1.5},
        {"max_class": "3"},
        {"priority": -1},
        {"priority": 1001},
        {"priority": True},
        {"allowed_users": "alice"},
        {"allowed_users": [1]},
        {"allowed_groups": ["bad\nname"]},
        {"description": "two\nlines"},
        {"unknown_field": 1},
    ],
    ids=lambda body: repr(body)[:40],
)
def test_invalid_bodies_are_422_and_store_nothing(client, body):
    problem = assert_problem(put_class(client, "c", **body), 422)
    assert problem["errors"][0]["loc"][0] == "body"
    assert_problem(client.get("/job-classes/c"), 404)


def test_max_below_default_names_max_class(client):
    problem = assert_problem(put_class(client, "c", default_class=5, max_class=4), 422)
    assert problem["errors"][0]["loc"] == ["body", "max_class"]


# --- submission with a job class ---------------------------------------------------------------


def test_a_job_gets_its_class_default_and_a_queue_of_that_class(client):
    put_class(client, "low", default_class=-7, max_class=0)
    specs = [{}, {"job_class": "low"}, {"job_class": "low", "priority_class": 2}]
    plain, classed, explicit = submit_ids(client, *specs)
    assert [job(client, j)["priority_class"] for j in (plain, classed, explicit)] == [0, -7, 2]
    tq = task_queues(client)[job(client, classed)["task_queue_id"]]
    assert (tq["priority_class"], tq["job_class"]) == (-7, "low")


def test_an_unknown_class_is_422_naming_the_field_and_stores_nothing(client, clean):
    put_class(client, "known")
    problem = assert_problem(submit(client, {"job_class": "known"}, {"job_class": "unknown"}), 422)
    assert problem["errors"][0]["loc"] == ["body", "jobs", 1, "job_class"]
    assert "unknown" in problem["detail"]
    assert count(clean, "SELECT count(*) FROM jobs") == 0


def test_admins_exceed_the_maximum_but_not_the_access_list(client, clean):
    put_class(client, "capped", default_class=-5, max_class=-5, allowed_groups=["g1"])
    [over] = submit_ids(client, {"job_class": "capped", "priority_class": 100})
    assert job(client, over)["priority_class"] == 100
    # a job the class is not open to could never be queued: bad input at its job_class
    problem = assert_problem(submit(client, {}, {"job_class": "capped", "owner_group": "g2"}), 422)
    assert "jobs[1]" in problem["detail"] and "'capped'" in problem["detail"]
    assert [e["loc"] for e in problem["errors"]] == [["body", "jobs", 1, "job_class"]]
    assert count(clean, "SELECT count(*) FROM jobs") == 1


def test_a_class_is_deleted_only_once_no_waiting_job_uses_it(client):
    put_class(client, "short", default_class=3)
    put_class(client, "other")
    ids = submit_ids(client, {"job_class": "short"}, {"job_class": "short"})
    matched = match_id(client)  # one job leaves the queue: the other still waits
    [waiting] = set(ids) - {matched}
    busy = assert_problem(client.delete("/job-classes/short"), 409)
    assert "1 waiting job" in busy["detail"] and busy["waiting_jobs"] == 1
    assert client.get("/job-classes/short").status_code == 200  # nothing changed
    assert client.delete(f"/jobs/{waiting}").status_code == 200  # killed: no job waits in it any more

    r = client.delete("/job-classes/short")

    assert r.status_code == 204 and r.content == b""
    assert_problem(client.get("/job-classes/short"), 404)
    assert job(client, matched)["job_class"] == "short"  # the matched job keeps the name
    assert_problem(submit(client, {"job_class": "short"}), 422)  # a new job may not name it
    assert [c["name"] for c in client.get("/job-classes").json()["job_classes"]] == ["other"]
    assert_problem(client.delete("/job-classes/short"), 404)


@pytest.mark.parametrize("role", ["operator", "user", "pilot"])
def test_only_admin_may_delete_a_class(as_role, role):
    assert put_class(as_role("admin"), "c").status_code == 201
    assert_problem(as_role(role, groups=["g1"]).delete("/job-classes/c"), 403)
    assert as_role("admin").delete("/job-classes/c").status_code == 204


# --- PATCH /jobs/{id} (as admin: authentication off) -------------------------------------------


def test_patch_moves_a_waiting_job_to_the_queue_of_its_new_class(client):
    [job_id] = submit_ids(client, {"sites": ["S1"]})
    old_tq = job(client, job_id)["task_queue_id"]
    r = patch(client, job_id, priority_class=5)
    assert r.status_code == 200, r.text
    assert (r.json()["priority_class"], r.json()["status"]) == (5, "Waiting")
    new_tq = r.json()["task_queue_id"]
    assert new_tq != old_tq
    tqs = task_queues(client)
    assert list(tqs) == [new_tq], "the emptied queue is deleted"
    assert (tqs[new_tq]["priority_class"], tqs[new_tq]["sites"], tqs[new_tq]["jobs"]) == (5, ["S1"], 1)
    assert_problem(client.get(f"/taskqueues/{old_tq}"), 404)


def test_patch_keeps_a_queue_that_still_holds_jobs(client):
    first, second = submit_ids(client, {}, {})
    old_tq = job(client, first)["task_queue_id"]
    new_tq = patch(client, first, priority_class=-3).json()["task_queue_id"]
    tqs = task_queues(client)
    assert {tq: (tqs[tq]["priority_class"], tqs[tq]["jobs"]) for tq in tqs} == {old_tq: (0, 1), new_tq: (-3, 1)}
    # and back: the job joins its old queue again, the class -3 queue goes
    assert patch(client, first, priority_class=0).json()["task_queue_id"] == old_tq
    assert list(task_queues(client)) == [old_tq]
    assert job(client, second)["task_queue_id"] == old_tq


def test_a_job_raised_to_class_5_is_matched_before_class_0_jobs(client):
    """Priority classes beat every policy: the newest, lowest-priority job goes first."""
    *others, last = submit_ids(client, {"user_priority": 10}, {"user_priority": 10}, {"user_priority": 0})
    patch(client, last, priority_class=5)
    assert match_id(client) == last
    assert {match_id(client), match_id(client)} == set(others)


def test_user_priority_10_after_patch_is_matched_first(client):
    ids = submit_ids(client, *[{}] * 6)
    favourites = {ids[3], ids[5]}
    for job_id in favourites:
        r = patch(client, job_id, user_priority=10)
        assert r.json()["user_priority"] == 10
        assert r.json()["task_queue_id"] == job(client, ids[0])["task_queue_id"], "same queue, new level"
    assert {match_id(client), match_id(client)} == favourites


def test_patch_of_a_matched_job_is_kept_for_its_reschedule(client):
    [job_id] = submit_ids(client, {"platforms": ["el9"]})
    assert client.post("/match", json={**ANYWHERE, "Platform": "el9"}).json()["job_id"] == job_id
    r = patch(client, job_id, priority_class=7, user_priority=3)
    assert r.status_code == 200, r.text
    assert (r.json()["status"], r.json()["priority_class"], r.json()["user_priority"]) == ("Matched", 7, 3)
    # the queue it was matched from is left empty, and the patch made none for a job not waiting
    assert [(tq["priority_class"], tq["jobs"]) for tq in task_queues(client).values()] == [(0, 0)]
    back = client.post(f"/jobs/{job_id}/status", json={"status": "Waiting"}).json()
    tq = task_queues(client)[back["task_queue_id"]]
    assert (tq["priority_class"], tq["platforms"]) == (7, ["el9"])


def test_patch_of_a_final_job_is_409(client):
    [job_id] = submit_ids(client, {})
    match_id(client)
    for status in ("Running", "Done"):
        assert client.post(f"/jobs/{job_id}/status", json={"status": status}).status_code == 200
    problem = assert_problem(patch(client, job_id, user_priority=5), 409)
    assert problem["current_status"] == "Done"
    assert job(client, job_id)["user_priority"] == 1


def test_patch_records_an_event(client, clean):
    [job_id] = submit_ids(client, {})
    patch(client, job_id, priority_class=-1, user_priority=4)
    with clean.engine().connect() as conn:
        rows = conn.exec_driver_sql(
            f"SELECT status, source, minor_status FROM job_events WHERE job_id = {job_id} ORDER BY id"
        ).all()
    assert [tuple(r) for r in rows] == [
        ("Waiting", "submit", None),
        ("Waiting", "priority", "priority_class 0->-1, user_priority 1->4"),
    ]


@pytest.mark.parametrize(
    "body",
    [{}, {"user_priority": 11}, {"user_priority": -1}, {"priority_class": 1025}, {"priority_class": "1"},
     {"user_priority": 2, "status": "Done"}, {"user_priority": None}],
    ids=lambda body: repr(body)[:40],
)  # fmt: skip
def test_invalid_patch_bodies_are_422_and_change_nothing(client, body):
    [job_id] = submit_ids(client, {})
    assert_problem(client.patch(f"/jobs/{job_id}", json=body), 422)
    assert (job(client, job_id)["user_priority"], job(client, job_id)["priority_class"]) == (1, 0)


def test_patch_of_an_unknown_job_is_404(client):
    assert_problem(patch(client, 999, user_priority=2), 404)


def test_patches_racing_pilots_lose_and_duplicate_no_job(client, server, database):
    """Pilots drain the queues while two callers move jobs between classes and levels:
    every job is handed out once, and the queues stay consistent."""
    ids = submit_ids(client, *[{"sites": ["S1", f"S{i % 3}"]} for i in range(120)])

    def pilot(api: httpx.Client) -> list[int]:
        got = []
        while (r := api.post("/match", json=ANYWHERE)).status_code == 200:
            got.append(r.json()["job_id"])
        assert r.status_code == 204, r.text
        return got

    def patcher(api: httpx.Client, stop: threading.Event) -> int:
        rng, changed = random.Random(), 0
        while not stop.is_set():
            r = patch(api, rng.choice(ids), priority_class=rng.randint(-2, 2), user_priority=rng.randint(0, 10))
            assert r.status_code == 200, r.text  # never final here: nobody reports Done
            changed += r.json()["status"] == "Waiting"
        return changed

    got, changed = run_together(server, [pilot] * 4, [patcher] * 2)
    # a pilot may stop early: in the few milliseconds between a moved job's commit and its
    # queue's new count, a matcher whose copy had drained that queue still sees it empty
    with server.client() as api:
        left = pilot(api)
    handed_out = [job_id for jobs in got for job_id in jobs] + left
    assert sorted(handed_out) == ids, "every job exactly once"
    assert len(left) <= 3, left
    assert sum(changed) > 0
    assert_queue_invariants(database)
    assert query(database, "SELECT count(*) FROM tq_jobs") == [(0,)]
    # a later reschedule queues each job in the task queue of the class it has now
    for job_id in ids:
        back = client.post(f"/jobs/{job_id}/status", json={"status": "Waiting"}).json()
        queued = task_queues(client)[back["task_queue_id"]]
        assert (queued["priority_class"], queued["sites"]) == (back["priority_class"], back["sites"])


# --- roles ---------------------------------------------------------------------------------------


@pytest.fixture
def admin(as_role):
    return as_role("admin", "root")


@pytest.fixture
def alice(as_role):
    return as_role("user", "alice", groups=["g1"])


@pytest.mark.parametrize("role", ["operator", "user", "pilot"])
def test_only_admin_may_put(as_role, admin, role):
    assert put_class(admin, "c").status_code == 201
    other = as_role(role, "alice", groups=["g1"])
    assert_problem(put_class(other, "c", max_class=5), 403)
    assert_problem(put_class(other, "new"), 403)
    assert [c["name"] for c in admin.get("/job-classes").json()["job_classes"]] == ["c"]
    assert admin.get("/job-classes/c").json()["max_class"] == 0


def test_who_reads_which_classes(as_role, admin, alice):
    put_class(admin, "open")
    put_class(admin, "mine", allowed_users=["alice"], allowed_groups=["g1", "g2"])
    put_class(admin, "bobs", allowed_users=["bob"])
    put_class(admin, "g2only", allowed_groups=["g2"])

    def names(api: httpx.Client) -> list[str]:
        return [c["name"] for c in api.get("/job-classes").json()["job_classes"]]

    assert names(as_role("operator", "op")) == ["bobs", "g2only", "mine", "open"]
    assert names(alice) == ["mine", "open"]
    assert alice.get("/job-classes/mine").status_code == 200
    assert_problem(alice.get("/job-classes/bobs"), 404)  # invisible is missing, as for jobs
    pilot = as_role("pilot", "p1")
    assert_problem(pilot.get("/job-classes"), 403)
    assert_problem(pilot.get("/job-classes/open"), 403)


def test_users_are_held_to_the_class_maximum(admin, alice, clean):
    put_class(admin, "capped", default_class=-10, max_class=-5)
    defaulted, at_max = submit_ids(alice, {"job_class": "capped"}, {"job_class": "capped", "priority_class": -5})
    assert [job(alice, j)["priority_class"] for j in (defaulted, at_max)] == [-10, -5]
    problem = assert_problem(submit(alice, {}, {"job_class": "capped", "priority_class": -4}), 403)
    assert "jobs[1]" in problem["detail"] and "<= -5" in problem["detail"]
    # with a class maximum above 0, users still stay at or below 0
    put_class(admin, "roomy", max_class=10)
    assert_problem(submit(alice, {"job_class": "roomy", "priority_class": 1}), 403)
    assert count(clean, "SELECT count(*) FROM jobs") == 2


def test_operators_may_exceed_the_class_maximum(as_role, admin):
    put_class(admin, "capped", max_class=-5, default_class=-5)
    operator = as_role("operator", "op")
    [job_id] = submit_ids(operator, {"job_class": "capped", "priority_class": 1024})
    assert job(operator, job_id)["priority_class"] == 1024


def test_a_class_a_user_may_not_use_refuses_the_batch(admin, alice, clean):
    put_class(admin, "bobs", allowed_users=["bob"])
    problem = assert_problem(submit(alice, {}, {}, {"job_class": "bobs"}), 422)
    assert "jobs[2]" in problem["detail"] and "'bobs'" in problem["detail"]
    assert count(clean, "SELECT count(*) FROM jobs") == 0


def test_users_lower_their_own_jobs_only(admin, alice):
    [mine] = submit_ids(alice, {"priority_class": -2})
    assert patch(alice, mine, priority_class=-9).json()["priority_class"] == -9
    assert patch(alice, mine, priority_class=-9).status_code == 200, "keeping it is not raising it"
    problem = assert_problem(patch(alice, mine, priority_class=-8), 403)
    assert "only lower" in problem["detail"]
    assert patch(alice, mine, user_priority=0).json()["user_priority"] == 0
    assert patch(alice, mine, user_priority=10).json()["user_priority"] == 10
    [bobs] = submit_ids(admin, {"owner": "bob"})
    assert_problem(patch(alice, bobs, user_priority=5), 404)
    assert job(alice, mine)["priority_class"] == -9


def test_a_refused_raise_changes_nothing(alice):
    [mine] = submit_ids(alice, {})
    assert_problem(patch(alice, mine, priority_class=1, user_priority=7), 403)
    assert (job(alice, mine)["priority_class"], job(alice, mine)["user_priority"]) == (0, 1)


def test_operators_raise_any_job(as_role, alice):
    [mine] = submit_ids(alice, {"priority_class": -50})
    operator = as_role("operator", "op")
    r = patch(operator, mine, priority_class=1024, user_priority=10)
    assert (r.json()["priority_class"], r.json()["user_priority"]) == (1024, 10)
    assert task_queues(operator)[r.json()["task_queue_id"]]["priority_class"] == 1024


def test_pilots_may_not_patch(as_role, admin):
    [job_id] = submit_ids(admin, {})
    pilot = as_role("pilot", "p1")
    assert pilot.post("/match", json=ANYWHERE).json()["job_id"] == job_id
    assert_problem(patch(pilot, job_id, priority_class=-1), 403)
