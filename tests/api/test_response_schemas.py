"""What the job, task-queue and pilot routes send matches the OpenAPI document the service publishes.

/match and the status reports encode their answers themselves (FastAPI does not
validate them), so each answer here is checked against the schema `/openapi.json`
gives for its operation and status. An object there takes no key it does not
declare: a field the answer sends beyond the document fails as a missing one does.
"""

from __future__ import annotations

import copy
from typing import Any
from urllib.parse import quote

import httpx
import jsonschema_rs
import pytest

API = "/api/v1"
RESOURCE = {"Site": "S1", "CPUTime": 10**6, "Tag": ["2Processors"]}
PILOT = {**RESOURCE, "PilotReference": "https://ce.example.org:9619/1.0", "PilotBenchmark": 12.5}


def closed(document: dict[str, Any]) -> dict[str, Any]:
    """The document's components with every object that lists its properties closed to others."""
    components = copy.deepcopy(document["components"])
    for schema in components["schemas"].values():
        if "properties" in schema:
            schema.setdefault("additionalProperties", False)
    return components


@pytest.fixture
def conforms(client: httpx.Client):
    """Checks a response against its operation's documented status, media type and schema."""
    document = client.get(client.base_url.copy_with(path="/openapi.json")).raise_for_status().json()
    components = closed(document)

    def check(response: httpx.Response, method: str, path: str) -> Any:
        operation = document["paths"][API + path][method]
        status = str(response.status_code)
        assert status in operation["responses"], f"{method.upper()} {path}: {status} is not documented"
        documented = operation["responses"][status]
        if "content" not in documented:
            assert response.content == b"", f"{method.upper()} {path}: {status} documents no body"
            return None
        assert response.headers["content-type"] == "application/json", f"{method.upper()} {path}: {response.text}"
        schema = documented["content"]["application/json"]["schema"]
        validator = jsonschema_rs.Draft202012Validator({**schema, "components": components})
        body = response.json()
        errors = [f"{'/'.join(map(str, e.instance_path))}: {e.message}" for e in validator.iter_errors(body)]
        assert not errors, f"{method.upper()} {path} {status}:\n" + "\n".join(errors)
        return body

    return check


def test_job_answers_match_the_published_schema(client, conforms):
    specs = [
        {"owner": "alice", "owner_group": "g", "sites": ["S1"], "tags": ["2Processors"], "max_ram_mb": 4000,
         "external_id": "run-1", "payload": {"executable": "run.sh", "arguments": ["--events", 10], "env": None}},
        {"owner": "bob", "owner_group": "g", "sites": ["S1"], "user_priority": 3},
        # elsewhere: no pilot here takes these, which stay waiting until withdrawn and killed
        {"owner": "carol", "owner_group": "h", "sites": ["S2"], "external_id": "run-3"},
        {"owner": "carol", "owner_group": "h", "sites": ["S2"]},
    ]  # fmt: skip
    submitted = conforms(client.post("/jobs", json={"jobs": specs}), "post", "/jobs")["jobs"]
    first, second, _, fourth = (job["job_id"] for job in submitted)

    assert conforms(client.get(f"/jobs/{first}"), "get", "/jobs/{job_id}")["payload"] == specs[0]["payload"]
    conforms(client.get("/jobs", params={"limit": 2}), "get", "/jobs")
    conforms(client.get("/jobs/by-external-id/run-1"), "get", "/jobs/by-external-id/{external_id}")
    conforms(client.patch(f"/jobs/{second}", json={"user_priority": 5}), "patch", "/jobs/{job_id}")

    matched = conforms(client.post("/match", json=PILOT), "post", "/match")
    assert matched["status"] == "Matched" and matched["task_queue_id"] is not None
    running = conforms(client.post(f"/jobs/{matched['job_id']}/status", json={"status": "Running"}),
                       "post", "/jobs/{job_id}/status")  # fmt: skip
    assert running["status"] == "Running"
    beat = {"status": "Running", "minor_status": "Application", "cpu_seconds": 1.5, "wall_seconds": 2.0}
    conforms(client.post(f"/jobs/{matched['job_id']}/status", json=beat), "post", "/jobs/{job_id}/status")
    handed_back = conforms(client.post(f"/jobs/{matched['job_id']}/status", json={"status": "Stalled"}),
                           "post", "/jobs/{job_id}/status")  # fmt: skip
    assert handed_back["status"] == "Stalled"
    returned = conforms(client.post(f"/jobs/{matched['job_id']}/status", json={"status": "Waiting"}),
                        "post", "/jobs/{job_id}/status")  # fmt: skip
    assert returned["status"] == "Waiting" and returned["task_queue_id"] is not None

    replayed = {**PILOT, "request_id": "once"}
    taken = conforms(client.post("/match", json=replayed), "post", "/match")
    assert conforms(client.post("/match", json=replayed), "post", "/match")["job_id"] == taken["job_id"]
    conforms(client.post(f"/jobs/{taken['job_id']}/reschedule"), "post", "/jobs/{job_id}/reschedule")
    done = conforms(client.post("/match", json=PILOT), "post", "/match")
    client.post(f"/jobs/{done['job_id']}/status", json={"status": "Running"}).raise_for_status()
    finished = conforms(client.post(f"/jobs/{done['job_id']}/status", json={"status": "Done", "cpu_seconds": 0.5}),
                        "post", "/jobs/{job_id}/status")  # fmt: skip
    assert finished["status"] == "Done" and finished["finished_at"] is not None

    tqs = conforms(client.get("/taskqueues"), "get", "/taskqueues")["task_queues"]
    assert tqs
    conforms(client.get(f"/taskqueues/{tqs[0]['task_queue_id']}"), "get", "/taskqueues/{tq_id}")
    explained = conforms(client.post("/taskqueues/matching", json=RESOURCE),
                         "post", "/taskqueues/matching")  # fmt: skip
    assert explained["task_queues"]

    conforms(client.delete("/jobs/by-external-id/run-3"), "delete", "/jobs/by-external-id/{external_id}")
    conforms(client.delete(f"/jobs/{fourth}"), "delete", "/jobs/{job_id}")
    while client.post("/match", json=PILOT).status_code == 200:
        pass  # the rest, until none is left
    assert conforms(client.post("/match", json=PILOT), "post", "/match") is None  # 204, no body

    pilots = conforms(client.get("/pilots"), "get", "/pilots")["pilots"]
    assert [p["reference"] for p in pilots] == [PILOT["PilotReference"]]
    pilot = conforms(client.get(f"/pilots/{quote(pilots[0]['reference'], safe='')}"), "get", "/pilots/{reference}")
    assert pilot["job_ids"]
