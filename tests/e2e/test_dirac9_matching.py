"""DIRAC 9's matching rules against a real server, over a socket, on both backends.

The rules one by one, both ways, are in tests/api/test_eligibility.py; here each
is checked once through uvicorn as a DIRAC pilot or site director would meet it:
RAM ranges, the Matcher's string and number habits, WholeNode by presence, the
owner rule, and the dry run's list of sites (also for a pilot pinned to a site).
"""

from __future__ import annotations

from typing import Any

import httpx

BIG = 10**6


def submit(client: httpx.Client, **fields: Any) -> tuple[int, int]:
    """One job of alice/users; (job id, task queue id)."""
    r = client.post("/jobs", json={"jobs": [{"owner": "alice", "owner_group": "users", "cpu_time": 3600, **fields}]})
    assert r.status_code == 201, r.text
    (job,) = r.json()["jobs"]
    return job["job_id"], job["task_queue_id"]


def listed(client: httpx.Client, body: dict[str, Any]) -> set[int]:
    r = client.post("/taskqueues/matching", json=body)
    assert r.status_code == 200, r.text
    return {tq["task_queue_id"] for tq in r.json()["task_queues"]}


def test_ram_ranges_from_submission_to_the_matched_job(client):
    _, plain = submit(client)
    job_id, big = submit(client, min_ram_mb=8000, max_ram_mb=12000)
    r = client.post("/jobs", json={"jobs": [{"owner": "a", "owner_group": "g", "min_ram_mb": 9, "max_ram_mb": 8}]})
    assert r.status_code == 422 and r.json()["errors"][0]["loc"] == ["body", "jobs", 0, "min_ram_mb"]
    queues = {tq["task_queue_id"]: tq for tq in client.get("/taskqueues").json()["task_queues"]}
    assert (queues[big]["min_ram_mb"], queues[big]["max_ram_mb"]) == (8000, 12000)
    assert (queues[plain]["min_ram_mb"], queues[plain]["max_ram_mb"]) == (0, 0)

    small = {"Site": "S1", "CPUTime": BIG, "MaxRAM": 4000}
    assert listed(client, small) == {plain}
    r = client.post("/taskqueues/matching", json=small)
    assert r.json()["analysis"]["rejected_by"]["ram"] == 1
    assert listed(client, {"Site": "S1", "CPUTime": BIG}) == {plain, big}  # no MaxRAM, no RAM condition
    r = client.post("/match", json={"Site": "S1", "CPUTime": BIG, "MaxRAM": "8000", "JobID": job_id})
    assert r.status_code == 200, r.text
    assert (r.json()["min_ram_mb"], r.json()["max_ram_mb"]) == (8000, 12000)


def test_the_matchers_habits_tags_as_text_numbers_as_text_and_whole_node(client):
    job_id, tq = submit(client, tags=["GPU", "WholeNode", "4Processors"])
    pilot = {"Site": "S1", "CPUTime": "86400", "Tag": "[GPU, 'SSD']", "RequiredTag": "GPU",
             "NumberOfProcessors": " 4 ", "WholeNode": False, "PilotBenchmark": "12.5"}  # fmt: skip
    assert listed(client, pilot) == {tq}
    assert listed(client, {**pilot, "Tag": "", "RequiredTag": ""}) == set()
    assert listed(client, {**pilot, "Tag": "SSD, Any"}) == {tq}
    bad = client.post("/match", json={**pilot, "MaxRAM": "4 GB"})
    assert bad.status_code == 422 and bad.json()["errors"][0]["loc"] == ["body", "MaxRAM"]
    r = client.post("/match", json=pilot)
    assert r.status_code == 200 and r.json()["job_id"] == job_id, r.text


def test_an_owner_alone_does_not_take_job_sharing_queues_of_others(client):
    r = client.put("/groups/shared", json={"job_share": 1000, "properties": ["JOB_SHARING"]})
    assert r.status_code in (200, 201), r.text
    job_id, shared = submit(client, owner_group="shared")
    assert listed(client, {"Site": "S1", "CPUTime": BIG, "Owner": "bob"}) == set()
    assert listed(client, {"Site": "S1", "CPUTime": BIG, "Owner": "bob", "OwnerGroup": "shared"}) == {shared}
    assert client.post("/match", json={"Site": "S1", "CPUTime": BIG, "Owner": "bob"}).status_code == 204
    r = client.post("/match", json={"Site": "S1", "CPUTime": BIG, "Owner": "bob", "OwnerGroup": ["shared"]})
    assert r.status_code == 200 and r.json()["job_id"] == job_id, r.text


def test_the_dry_run_takes_several_sites_and_match_one(client):
    _, s1 = submit(client, sites=["S1"])
    _, s2 = submit(client, sites=["S2"], banned_sites=["S1"])
    submit(client, sites=["S1", "S3"], banned_sites=["S1"])  # S1 banned, S3 not asked for
    assert listed(client, {"Site": ["S1", "S2"], "CPUTime": BIG}) == {s1, s2}
    r = client.post("/match", json={"Site": ["S1", "S2"], "CPUTime": BIG})
    assert r.status_code == 422 and r.json()["errors"][0]["loc"] == ["body", "Site"]


def test_a_pilot_pinned_to_a_site_may_list_only_that_site(as_role):
    operator = as_role("operator")
    _, tq = submit(operator, sites=["S1"])
    pilot = as_role("pilot", site="S1")
    assert listed(pilot, {"Site": ["S1"], "CPUTime": BIG}) == {tq}
    assert pilot.post("/taskqueues/matching", json={"Site": ["S1", "S2"], "CPUTime": BIG}).status_code == 403
