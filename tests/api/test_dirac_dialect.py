"""What a DIRAC installation needs of the API, on both backends: jobs known by the
submitter's id, matches that hand the job off, DIRAC's match dictionaries (a key left
out, `""`, `[]`, `ANY`, `negativeCond`), queues listed while empty, deleted on demand
and numbered in creation order, and running jobs reported from outside.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.problems import assert_problem

DIRAC = {"unstated_fields": "dirac"}


def spec(**overrides) -> dict:
    return {"owner": "userName", "owner_group": "myGroup", "cpu_time": 5000, **overrides}


def submit(api: httpx.Client, *specs: dict) -> list[dict]:
    r = api.post("/jobs", json={"jobs": list(specs)})
    assert r.status_code == 201, r.text
    return r.json()["jobs"]


def dry_run(api: httpx.Client, **resource) -> list[int]:
    r = api.post("/taskqueues/matching", json={"CPUTime": 50000, **resource})
    assert r.status_code == 200, r.text
    return [tq["task_queue_id"] for tq in r.json()["task_queues"]]


# --- external ids ------------------------------------------------------------------------


def test_a_job_is_found_and_withdrawn_by_its_external_id(client):
    [job] = submit(client, spec(external_id="123"))
    assert job["external_id"] == "123"
    found = client.get("/jobs/by-external-id/123").json()
    assert (found["job_id"], found["status"], found["task_queue_id"]) == (
        job["job_id"],
        "Waiting",
        job["task_queue_id"],
    )
    withdrawn = client.delete("/jobs/by-external-id/123")
    assert withdrawn.status_code == 200 and withdrawn.json()["status"] == "Killed"
    assert client.get(f"/jobs/{job['job_id']}/history").json()["events"][-1]["source"] == "withdraw"
    assert_problem(client.delete("/jobs/by-external-id/123"), 404)  # nothing holds it any more
    assert client.get("/jobs/by-external-id/123").json()["status"] == "Killed"  # the newest that had it
    assert_problem(client.get("/jobs/by-external-id/124"), 404)


def test_submitting_an_external_id_again_replaces_its_waiting_job(client):
    [first] = submit(client, spec(external_id="203", sites=["CLOUD.IN2P3.fr"]))
    [second] = submit(client, spec(external_id="203", sites=["LCG.CERN.ch", "CLOUD.IN2P3.fr"]))
    assert second["task_queue_id"] != first["task_queue_id"]
    assert client.get(f"/jobs/{first['job_id']}").json()["status"] == "Killed"
    assert client.get("/jobs/by-external-id/203").json()["job_id"] == second["job_id"]
    # the queue the first left stays until deleted, and is listed when asked for empty ones
    assert first["task_queue_id"] in dry_run(client, include_empty=True, **DIRAC)
    assert first["task_queue_id"] not in dry_run(client, **DIRAC)


def test_an_external_id_is_refused_while_its_job_runs_and_free_once_handed_off(client):
    [job] = submit(client, spec(external_id="7"))
    assert client.post("/match", json={"Site": "S1", "CPUTime": 10**6, "JobID": job["job_id"]}).status_code == 200
    problem = assert_problem(client.post("/jobs", json={"jobs": [spec(external_id="7")]}), 409)
    assert "'7' by job" in problem["detail"]
    assert_problem(client.delete("/jobs/by-external-id/7"), 409)
    client.delete(f"/jobs/{job['job_id']}")  # killed: the id is free again
    [again] = submit(client, spec(external_id="7"))
    taken = client.post("/match", json={"Site": "S1", "CPUTime": 10**6, "handoff": True})
    assert taken.json()["job_id"] == again["job_id"] and taken.json()["status"] == "HandedOff"
    assert_problem(client.delete("/jobs/by-external-id/7"), 404)
    [third] = submit(client, spec(external_id="7"))  # DIRAC's reschedule inserts it again
    assert client.get("/jobs/by-external-id/7").json()["job_id"] == third["job_id"]


def test_one_submission_gives_an_external_id_once(client):
    problem = assert_problem(client.post("/jobs", json={"jobs": [spec(external_id="1"), spec(external_id="1")]}), 422)
    assert "given to two jobs" in problem["errors"][0]["msg"]


# --- hand-off ----------------------------------------------------------------------------


def test_a_handed_off_job_has_left_for_good_whatever_the_lease(server_factory):
    server = server_factory(JOBS__MATCHED_LEASE_SECONDS="1", JOBS__LEASE_SWEEP_SECONDS="0.2")
    with server.client() as api:
        [job] = submit(api, spec(external_id="9"))
        taken = api.post("/match", json={"Site": "S1", "CPUTime": 10**6, "handoff": True}).json()
        assert (taken["status"], taken["lease_expires_at"], taken["task_queue_id"]) == (
            "HandedOff",
            None,
            job["task_queue_id"],
        )
        assert taken["finished_at"] is not None and taken["site"] == "S1"
        time.sleep(2)  # several lease sweeps
        assert api.get(f"/jobs/{job['job_id']}").json()["status"] == "HandedOff"
        events = [(e["status"], e["source"]) for e in api.get(f"/jobs/{job['job_id']}/history").json()["events"]]
        assert events == [("Waiting", "submit"), ("HandedOff", "match")]
        assert api.post("/match", json={"Site": "S1", "CPUTime": 10**6}).status_code == 204
        assert_problem(api.post(f"/jobs/{job['job_id']}/status", json={"status": "Running"}), 409)


# --- DIRAC's match dictionaries ----------------------------------------------------------


def test_a_key_left_out_empty_or_any_puts_no_condition(client):
    tqs = {
        name: submit(client, spec(**fields))[0]["task_queue_id"]
        for name, fields in {
            "centos7": {"platforms": ["centos7"]},
            "ubuntu": {"platforms": ["ubuntu"]},
            "none": {},
        }.items()
    }
    everything = set(tqs.values())
    for asked in ({}, {"Platform": ""}, {"Platform": []}, {"Platform": "ANY"}, {"Platform": ["x", "any"]}):
        assert set(dry_run(client, **DIRAC, **asked)) == everything, asked
    assert set(dry_run(client, **DIRAC, Platform="slc5")) == {tqs["none"]}
    assert set(dry_run(client, **DIRAC, Platform=["slc5", "ubuntu"])) == {tqs["none"], tqs["ubuntu"]}
    # the service's own default is DIRAC's rule too; a request may still ask for the strict one
    assert set(dry_run(client)) == everything
    assert set(dry_run(client, unstated_fields="strict")) == {tqs["none"]}


def test_tags_follow_dirac(client):
    tqs = {
        name: submit(client, spec(tags=tags))[0]["task_queue_id"]
        for name, tags in {"mp": ["MultiProcessor"], "mp_gpu": ["MultiProcessor", "GPU"], "none": []}.items()
    }
    for asked in ({}, {"Tag": ""}, {"Tag": []}):
        assert set(dry_run(client, **DIRAC, **asked)) == {tqs["none"]}, asked
    assert set(dry_run(client, **DIRAC, Tag="any")) == set(tqs.values())
    assert set(dry_run(client, **DIRAC, Tag=["MultiProcessor"])) == {tqs["none"], tqs["mp"]}
    assert set(dry_run(client, **DIRAC, Tag=["MultiProcessor", "GPU"], RequiredTag="GPU")) == {tqs["mp_gpu"]}
    assert_problem(client.post("/taskqueues/matching", json={"CPUTime": 1, "RequiredTag": "GPU", **DIRAC}), 400)


def test_negative_conditions_exclude_the_queues_meeting_all_fields_of_one(client):
    tqs = {
        name: submit(client, spec(**fields))[0]["task_queue_id"]
        for name, fields in {
            "merge_cern": {"job_types": ["Merge"], "sites": ["LCG.CERN.ch"]},
            "merge_any": {"job_types": ["Merge"]},
            "user": {"job_types": ["User"], "owner_group": "other"},
        }.items()
    }
    assert set(dry_run(client, **DIRAC, negativeCond={"JobType": ["Merge"]})) == {tqs["user"]}
    assert set(dry_run(client, **DIRAC, negativeCond={"JobType": "Merge", "Site": "LCG.CERN.ch"})) == {
        tqs["merge_any"],
        tqs["user"],
    }
    assert set(dry_run(client, **DIRAC, negativeCond=[{"OwnerGroup": ["other"]}, {"Site": ["LCG.CERN.ch"]}])) == {
        tqs["merge_any"]
    }
    assert set(dry_run(client, **DIRAC, negativeCond={})) == set(tqs.values())
    r = client.post("/taskqueues/matching", json={"CPUTime": 50000, "negativeCond": {"JobType": "Merge"}, **DIRAC})
    assert r.json()["analysis"]["rejected_by"]["excluded"] == 2
    problem = assert_problem(
        client.post("/match", json={"Site": "S", "CPUTime": 1, "negativeCond": {"Setup": "x"}}), 422
    )
    assert "cannot exclude by Setup" in problem["errors"][0]["msg"]
    resource = {"Site": "S", "CPUTime": 10**6, "handoff": True, "exclude": {"JobType": "Merge"}, **DIRAC}
    taken = client.post("/match", json=resource)
    assert taken.json()["task_queue_id"] == tqs["user"]


# --- task queues -------------------------------------------------------------------------


def test_an_empty_queue_is_deleted_on_demand_and_one_with_jobs_is_not(client):
    [job] = submit(client, spec(external_id="5"))
    tq = job["task_queue_id"]
    assert_problem(client.delete(f"/taskqueues/{tq}"), 409)
    client.delete("/jobs/by-external-id/5")
    client.get("/taskqueues")  # the withdrawal deleted the emptied queue, or the call below does
    assert client.delete(f"/taskqueues/{tq}").status_code in (204, 404)
    assert_problem(client.get(f"/taskqueues/{tq}"), 404)
    assert_problem(client.delete(f"/taskqueues/{tq}"), 404)


def test_identical_requirements_inserted_at_once_make_one_queue_and_ids_stay_consecutive(client):
    definition = spec(sites=["LCG.RAL.uk"], platforms=["el9"])
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda i: submit(client, {**definition, "external_id": f"c{i}"})[0], range(16)))
    [tq] = {a["task_queue_id"] for a in answers}
    after = submit(client, spec(sites=["LCG.RAL.uk"], platforms=["el8"]))[0]["task_queue_id"]
    assert after == tq + 1


def test_a_lone_queue_of_a_group_with_the_default_share_has_dirac_s_priority(client):
    [job] = submit(client, spec())
    assert client.post("/priorities/recompute").status_code == 200
    assert client.get(f"/taskqueues/{job['task_queue_id']}").json()["priority"] == pytest.approx(1000.0)


# --- running jobs reported from outside ---------------------------------------------------


def test_a_report_of_running_jobs_replaces_the_source_s_last(client):
    body = {"running": [{"owner_group": "g", "owner": "a", "jobs": 3}, {"owner_group": "g", "owner": "a", "jobs": 2}]}
    receipt = client.put("/running/dirac", json=body).json()
    assert (receipt["source"], receipt["groups"], receipt["jobs"]) == ("dirac", 1, 5)
    assert_problem(client.put("/running/bad source", json=body), 422)
    assert_problem(
        client.put("/running/dirac", json={"running": [{"owner_group": "g", "owner": "a", "jobs": -1}]}), 422
    )


def test_a_queue_run_dry_gives_its_share_to_its_group_s_other_queues_within_seconds(client):
    client.put("/groups/myGroup", json={"job_share": 1000.0})
    [small] = submit(client, spec(job_types=["Merge"]))
    big = submit(client, *[spec(job_types=["User"])] * 5)[0]["task_queue_id"]
    assert client.post("/priorities/recompute").status_code == 200
    assert client.get(f"/taskqueues/{big}").json()["priority"] == pytest.approx(500.0)
    taken = client.post("/match", json={"Site": "S", "CPUTime": 10**6, "JobID": small["job_id"], **DIRAC})
    assert taken.status_code == 200
    deadline = time.monotonic() + 10
    while client.get(f"/taskqueues/{big}").json()["priority"] != pytest.approx(1000.0):
        assert time.monotonic() < deadline, client.get(f"/taskqueues/{big}").json()["priority"]
        time.sleep(0.2)
