"""GPU jobs through the API on both backends: a job asking for GPUs goes only to a pilot
offering at least as many (`NumberOfGPUs`), through the dry run and `/match` alike."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

BIG = 10**6  # CPU seconds that take every default bucket


def submit_one(client: httpx.Client, **fields: Any) -> tuple[int, int]:
    spec = {"owner": "alice", "owner_group": "users", "cpu_time": 3600, **fields}
    r = client.post("/jobs", json={"jobs": [spec]})
    assert r.status_code == 201, r.text
    (job,) = r.json()["jobs"]
    return job["job_id"], job["task_queue_id"]


def resource(**fields: Any) -> dict[str, Any]:
    return {"Site": "S1", "CPUTime": BIG, **fields}


def dry_run(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    r = client.post("/taskqueues/matching", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def match(client: httpx.Client, body: dict[str, Any]) -> int | None:
    r = client.post("/match", json=body)
    assert r.status_code in (200, 204), r.text
    return r.json()["job_id"] if r.status_code == 200 else None


@pytest.mark.parametrize("rule", ["dirac", "strict"])
def test_a_gpu_job_waits_for_a_pilot_offering_enough_gpus(client, rule):
    job_id, tq_id = submit_one(client, number_of_gpus=2)
    for short in (resource(), resource(NumberOfGPUs=0), resource(NumberOfGPUs="1")):
        answer = dry_run(client, {**short, "unstated_fields": rule})
        assert answer["task_queues"] == [] and answer["analysis"]["rejected_by"]["gpus"] == 1
        assert match(client, {**short, "unstated_fields": rule}) is None
    enough = resource(NumberOfGPUs=2, unstated_fields=rule)
    assert [tq["task_queue_id"] for tq in dry_run(client, enough)["task_queues"]] == [tq_id]
    assert match(client, resource(NumberOfGPUs=4, unstated_fields=rule)) == job_id


def test_a_job_asking_for_no_gpu_goes_to_any_pilot_and_gpu_jobs_get_their_own_queue(client):
    plain, plain_tq = submit_one(client)
    gpu, gpu_tq = submit_one(client, number_of_gpus=1)
    assert plain_tq != gpu_tq
    assert match(client, resource()) == plain  # a pilot without GPUs takes the job asking for none
    assert match(client, resource()) is None
    assert match(client, resource(number_of_gpus=1)) == gpu


def test_a_bad_gpu_count_is_refused_at_its_field(client):
    r = client.post("/jobs", json={"jobs": [{"owner": "a", "owner_group": "g", "number_of_gpus": -1}]})
    assert r.status_code == 422 and r.json()["errors"][0]["loc"] == ["body", "jobs", 0, "number_of_gpus"]
    r = client.post("/taskqueues/matching", json=resource(NumberOfGPUs="lots"))
    assert r.status_code == 422 and r.json()["errors"][0]["loc"] == ["body", "NumberOfGPUs"]
