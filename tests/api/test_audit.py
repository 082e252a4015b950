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
    assert by_action["site_mask.ban"]["detail"] == {"reason": "disk full", "created": True}
    assert by_action["job.priority"]["detail"]["asked"]["user_priority"] == 4
    times = [datetime.fromisoformat(e["at"]) for e in log["entries"]]
    assert times == sorted(times, reverse=True) and times[-1] >= started - timedelta(seconds=5)


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
