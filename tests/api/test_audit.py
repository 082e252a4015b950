"""The audit log over real HTTP: every operator change recorded with its actor, read by admins,
filtered and paged; on both backends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.problems import assert_problem

PILOT = {"Site": "S1", "CPUTime": 10**6}


def actions(entries: list[dict]) -> list[tuple]:
    return [(e["actor"], e["action"], e["target"]) for e in entries]


def test_every_operator_change_is_recorded_with_who_made_it(as_role):
    admin, operator = as_role("admin", "ops-anna"), as_role("operator", "ops-olga")
    alice = as_role("user", "alice", groups=["g"])
    started = datetime.now(UTC)
    assert admin.put("/groups/g", json={"job_share": 500}).status_code == 201
    assert admin.put("/job-classes/short", json={"default_class": 0}).status_code == 201
    assert admin.put("/limits", json={"limits": [{"site": "S1", "attribute": "owner_group", "value": "g",
                                                      "running_limit": 5}]}).status_code == 200  # fmt: skip
    assert operator.put("/site-mask/S9", json={"reason": "disk full"}).status_code == 201
    assert operator.delete("/site-mask/S9").status_code == 204
    assert admin.post("/associations/usage/reset", json={"account": "g"}).status_code == 200
    assert admin.post("/priorities/recompute").status_code == 200
    (job,) = alice.post("/jobs", json={"jobs": [{"owner": "alice", "owner_group": "g"}]}).json()["jobs"]
    assert alice.patch(f"/jobs/{job['job_id']}", json={"user_priority": 4}).status_code == 200
    assert admin.delete("/job-classes/short").status_code == 204
    assert admin.delete("/groups/g").status_code == 204
    assert admin.post("/jobs/purge", json={"older_than_seconds": 86400}).status_code == 200
    log = admin.get("/audit").json()
    assert log["next_cursor"] is None
    assert actions(log["entries"]) == list(reversed([
        ("ops-anna", "group.put", "g"), ("ops-anna", "job_class.put", "short"), ("ops-anna", "site_limits.put", None),
        ("ops-olga", "site_mask.ban", "S9"), ("ops-olga", "site_mask.allow", "S9"), ("ops-anna", "usage.reset", "g"),
        ("ops-anna", "priorities.recompute", None), ("alice", "job.priority", str(job["job_id"])),
        ("ops-anna", "job_class.delete", "short"), ("ops-anna", "group.delete", "g"), ("ops-anna", "purge.run", None),
    ]))  # fmt: skip
    by_action = {e["action"]: e for e in log["entries"]}
    assert by_action["group.put"]["detail"]["asked"]["job_share"] == 500 and by_action["group.put"]["detail"]["created"]
    assert by_action["site_mask.ban"]["detail"] == {"reason": "disk full", "created": True, "reported": False}
    assert by_action["job.priority"]["detail"]["asked"]["user_priority"] == 4
    times = [datetime.fromisoformat(e["at"]) for e in log["entries"]]
    assert times == sorted(times, reverse=True) and times[-1] >= started - timedelta(seconds=5)


def test_each_entry_records_the_new_values_beside_what_was_selected(as_role):
    admin = as_role("admin", "ops-anna")
    jobs = [{"owner": "alice", "owner_group": "g", "sites": ["S1"]}] * 3 + [{"owner": "bob", "owner_group": "h",
                                                                            "sites": ["S2"]}]  # fmt: skip
    ids = [j["job_id"] for j in admin.post("/jobs", json={"jobs": jobs}).json()["jobs"]]
    changes = [
        ("/jobs/hold", {"filter": {"owner": "alice"}, "reason": "storage downtime"}),
        ("/jobs/release", {"filter": {"job_ids": ids[:2]}, "reason": "storage back"}),
        ("/jobs/priority", {"filter": {"owner": "alice", "status": ["Waiting"]}, "change": {"user_priority": 7}}),
        ("/jobs/kill", {"filter": {"job_ids": [ids[2]]}}),
        ("/jobs/reschedule", {"filter": {"owner": "alice"}}),
    ]
    for path, body in changes:
        assert admin.post(path, json=body).status_code == 200
    assert admin.patch(f"/jobs/{ids[0]}", json={"priority_class": 2}).status_code == 200
    bob_queue = admin.post("/match", json={"Site": "S2", "CPUTime": 10**6}).json()["task_queue_id"]
    assert admin.delete(f"/taskqueues/{bob_queue}").status_code == 204  # left empty by the match
    assert admin.put("/site-mask/S7", json={"reason": "disk full"}).status_code == 201
    assert admin.put("/groups/g", json={"job_share": 250}).status_code == 201

    entries = admin.get("/audit").json()["entries"]
    detail = {e["action"]: e["detail"] for e in entries}
    assert detail["bulk.hold"]["filter"] == {"owner": "alice"} and detail["bulk.hold"]["new"] == {"status": "Held"}
    assert detail["bulk.hold"]["changed"] == 3 and detail["bulk.hold"]["reason"] == "storage downtime"
    assert (
        detail["bulk.release"]["filter"] == {"job_ids": ids[:2]} and detail["bulk.release"]["reason"] == "storage back"
    )
    assert "reason" not in detail["bulk.kill"]  # none given
    assert detail["bulk.release"]["new"] == {"status": "Waiting"}
    assert detail["bulk.priority"]["filter"] == {"owner": "alice", "status": ["Waiting"]}
    assert detail["bulk.priority"]["new"] == {"user_priority": 7} and detail["bulk.priority"]["changed"] == 2
    assert detail["bulk.kill"]["new"] == {"status": "Killed"} and detail["bulk.kill"]["job_ids"] == [ids[2]]
    assert detail["bulk.reschedule"]["new"] == {"status": "Waiting"} and detail["bulk.reschedule"]["changed"] == 0
    assert detail["job.priority"]["asked"]["priority_class"] == 2
    assert detail["job.priority"]["new"] == {"user_priority": 7, "priority_class": 2}
    assert detail["site_mask.ban"] == {"reason": "disk full", "created": True, "reported": False}
    assert detail["group.put"]["asked"]["job_share"] == 250
    [deleted] = [e for e in entries if e["action"] == "task_queue.delete"]
    assert (deleted["actor"], deleted["target"], deleted["detail"]) == ("ops-anna", str(bob_queue), None)


def test_the_log_is_filtered_paged_and_for_admins_only(as_role):
    admin, other = as_role("admin", "ops-anna"), as_role("admin", "ops-bert")
    for share in (100, 200, 300):
        admin.put("/groups/g", json={"job_share": share})
    other.put("/groups/h", json={"job_share": 50})
    assert actions(admin.get("/audit", params={"actor": "ops-bert"}).json()["entries"]) == [
        ("ops-bert", "group.put", "h")
    ]
    assert len(admin.get("/audit", params={"action": "group.put"}).json()["entries"]) == 4
    assert admin.get("/audit", params={"since": "2999-01-01T00:00:00Z"}).json()["entries"] == []
    first = admin.get("/audit", params={"limit": 3}).json()
    rest = admin.get("/audit", params={"limit": 3, "after": first["next_cursor"]}).json()
    assert len(first["entries"]) == 3 and len(rest["entries"]) == 1 and rest["next_cursor"] is None
    shares = [e["detail"]["asked"]["job_share"] for e in first["entries"] + rest["entries"]]
    assert shares == [50, 300, 200, 100]
    problem = assert_problem(admin.get("/audit", params={"actr": "ops-bert"}), 422)
    assert "actr" in str(problem["errors"])
    assert_problem(admin.get("/audit", params={"since": "2026-11-26T10:00:00"}), 422)  # no zone
    for role in ("operator", "user", "pilot"):
        assert_problem(as_role(role, "x", groups=["g"]).get("/audit"), 403)
