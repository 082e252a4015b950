"""Actions on many jobs at once over real HTTP, on both backends: kill, hold and release,
reschedule, priority; users on their own jobs only; dry runs; the selection refused when empty."""

from __future__ import annotations

import sqlalchemy as sa

from fairmatch.db.tables import tq_jobs
from tests.problems import assert_problem

PILOT = {"Site": "S1", "CPUTime": 10**7}


def submit(client, owner: str, n: int, **spec) -> list[int]:
    r = client.post("/jobs", json={"jobs": [{"owner": owner, "owner_group": "g", **spec}] * n})
    assert r.status_code == 201, r.text
    return [j["job_id"] for j in r.json()["jobs"]]


def statuses(client, ids: list[int]) -> list[str]:
    return [client.get(f"/jobs/{i}").json()["status"] for i in ids]


def test_kill_by_filter_kills_the_unfinished_and_leaves_the_rest(as_role, database):
    admin, pilot = as_role("admin", "ops-anna"), as_role("pilot", "p1")
    waiting = submit(admin, "alice", 4)
    other = submit(admin, "bob", 2)
    running = pilot.post("/match", json={**PILOT, "JobID": waiting[0]}).json()["job_id"]
    pilot.post(f"/jobs/{running}/status", json={"status": "Running"})
    dry = admin.post("/jobs/kill", json={"filter": {"owner": "alice"}, "dry_run": True}).json()
    assert dry == {"matched": 4, "changed": 4, "job_ids": waiting}
    assert statuses(admin, waiting) == ["Running"] + ["Waiting"] * 3  # a dry run changes nothing
    done = admin.post("/jobs/kill", json={"filter": {"owner": "alice"}}).json()
    assert done == {"matched": 4, "changed": 4, "job_ids": waiting}
    assert statuses(admin, waiting) == ["Killed"] * 4 and statuses(admin, other) == ["Waiting"] * 2
    again = admin.post("/jobs/kill", json={"filter": {"owner": "alice"}}).json()
    assert again == {"matched": 4, "changed": 0, "job_ids": []}  # final: left as they are
    with database.engine().connect() as conn:
        queued = sa.select(sa.func.count()).select_from(tq_jobs).where(tq_jobs.c.job_id.in_(waiting + other))
        assert conn.execute(queued).scalar() == 2  # only bob's still wait in a task queue
    history = admin.get(f"/jobs/{waiting[1]}/history").json()["events"]
    assert (history[-1]["status"], history[-1]["source"], history[-1]["by"]) == ("Killed", "kill", "ops-anna")
    (entry, *_) = admin.get("/audit", params={"action": "bulk.kill"}).json()["entries"]
    assert entry["detail"]["changed"] == 0 and entry["detail"]["filter"] == {"owner": "alice"}


def test_a_held_job_is_never_matched_and_comes_back_at_its_place(as_role):
    admin, pilot = as_role("admin"), as_role("pilot", "p1")
    first, second, third = submit(admin, "alice", 3, user_priority=3)
    held = admin.post("/jobs/hold", json={"filter": {"job_ids": [first, second]}}).json()
    assert held == {"matched": 2, "changed": 2, "job_ids": [first, second]}
    assert statuses(admin, [first, second, third]) == ["Held", "Held", "Waiting"]
    assert pilot.post("/match", json=PILOT).json()["job_id"] == third
    assert pilot.post("/match", json=PILOT).status_code == 204  # the held jobs are out of reach
    assert admin.get("/jobs", params={"status": "Held"}).json()["jobs"][0]["user_priority"] == 3
    released = admin.post("/jobs/release", json={"filter": {"status": ["Held"]}}).json()
    assert released["changed"] == 2 and statuses(admin, [first, second]) == ["Waiting", "Waiting"]
    # back in their queue with their ids, so at their place among its lowest ids, and their level
    tqs = {admin.get(f"/jobs/{i}").json()["task_queue_id"] for i in (first, second)}
    assert len(tqs) == 1 and admin.get(f"/taskqueues/{tqs.pop()}").json()["jobs"] == 2
    assert {pilot.post("/match", json=PILOT).json()["job_id"] for _ in range(2)} == {first, second}
    job = admin.get(f"/jobs/{first}").json()
    assert job["user_priority"] == 3
    events = [(e["status"], e["source"]) for e in admin.get(f"/jobs/{first}/history").json()["events"]]
    assert events[1:4] == [("Held", "hold"), ("Waiting", "release"), ("Matched", "match")]


def test_only_waiting_jobs_are_held_and_a_held_one_is_killed_or_released_only(as_role):
    admin, pilot = as_role("admin"), as_role("pilot", "p1")
    ids = submit(admin, "alice", 2)
    matched = pilot.post("/match", json={**PILOT, "JobID": ids[0]}).json()["job_id"]
    assert admin.post("/jobs/hold", json={"filter": {"owner": "alice"}}).json()["job_ids"] == [ids[1]]
    assert statuses(admin, [matched, ids[1]]) == ["Matched", "Held"]
    assert_problem(admin.post(f"/jobs/{ids[1]}/status", json={"status": "Waiting"}), 409)  # no report releases it
    assert_problem(admin.post(f"/jobs/{ids[1]}/reschedule"), 409)
    assert admin.delete(f"/jobs/{ids[1]}").json()["status"] == "Killed"


def test_users_act_on_their_own_jobs_only(as_role):
    admin = as_role("admin")
    alice, bob = as_role("user", "alice", groups=["g"]), as_role("user", "bob", groups=["g"])
    mine, theirs = submit(alice, "alice", 2), submit(bob, "bob", 2)
    result = alice.post("/jobs/hold", json={"filter": {"job_ids": mine + theirs}}).json()
    assert result == {"matched": 2, "changed": 2, "job_ids": mine}
    assert statuses(admin, theirs) == ["Waiting", "Waiting"]
    changed = alice.post("/jobs/priority", json={"filter": {"owner_group": "g"}, "change": {"user_priority": 7}})
    assert changed.json()["job_ids"] == mine
    assert [admin.get(f"/jobs/{i}").json()["user_priority"] for i in mine + theirs] == [7, 7, 1, 1]
    raised = alice.post("/jobs/priority", json={"filter": {"owner": "alice"}, "change": {"priority_class": 5}})
    assert_problem(raised, 403)  # a user may only lower the class
    assert [admin.get(f"/jobs/{i}").json()["priority_class"] for i in mine] == [0, 0]


def test_reschedule_in_bulk_takes_back_what_pilots_hold(as_role):
    admin, pilot = as_role("admin"), as_role("pilot", "p1")
    ids = submit(admin, "alice", 3)
    for _ in range(2):
        pilot.post("/match", json=PILOT)
    result = admin.post("/jobs/reschedule", json={"filter": {"status": ["Matched", "Waiting"]}}).json()
    assert result["matched"] == 3 and result["changed"] == 2
    assert statuses(admin, ids) == ["Waiting"] * 3
    assert [j["reschedules"] for j in admin.get("/jobs").json()["jobs"]] == [0, 0, 0]


def test_a_selection_must_name_jobs_and_knows_its_filters(as_role):
    admin = as_role("admin")
    for body in ({"filter": {}}, {"filter": {"status": []}}, {}):
        assert_problem(admin.post("/jobs/kill", json=body), 422)
    problem = assert_problem(admin.post("/jobs/kill", json={"filter": {"sites": ["S1"]}}), 422)
    assert "sites" in str(problem["errors"])
    assert_problem(admin.post("/jobs/hold", json={"filter": {"job_ids": [0]}}), 422)
    assert_problem(admin.post("/jobs/priority", json={"filter": {"owner": "a"}, "change": {}}), 422)
    for reason in ("", " ", "line\nbreak", "x" * 256, 5):
        problem = assert_problem(admin.post("/jobs/hold", json={"filter": {"owner": "a"}, "reason": reason}), 422)
        assert "reason" in str(problem["errors"])
    assert_problem(as_role("pilot", "p1").post("/jobs/kill", json={"filter": {"owner": "a"}}), 403)


def test_a_reason_is_the_jobs_minor_status_and_their_history_s(as_role):
    admin = as_role("admin", "ops-anna")
    first, second = submit(admin, "alice", 2)
    held = admin.post("/jobs/hold", json={"filter": {"owner": "alice"}, "reason": "storage downtime, GGUS 4711"})
    assert held.json()["changed"] == 2
    assert [admin.get(f"/jobs/{i}").json()["minor_status"] for i in (first, second)] == [
        "storage downtime, GGUS 4711"
    ] * 2
    event = admin.get(f"/jobs/{first}/history").json()["events"][-1]
    assert (event["status"], event["minor_status"], event["by"]) == ("Held", "storage downtime, GGUS 4711", "ops-anna")
    assert (
        admin.post("/jobs/release", json={"filter": {"job_ids": [first]}, "reason": "storage back"}).status_code == 200
    )
    assert admin.get(f"/jobs/{first}").json()["minor_status"] == "storage back"
    assert admin.post("/jobs/release", json={"filter": {"job_ids": [second]}}).status_code == 200
    # the hold's reason went with it: the release states its own
    assert admin.get(f"/jobs/{second}").json()["minor_status"] == "Released from hold"
