"""PostgreSQL goes away and comes back: the service answers 503 problem+json with
Retry-After meanwhile (never 500, never a hang), /readyz says so, and both
recover by themselves once the database is back, with no server restart."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import Server, start_server
from tests.fault.cluster import PgCluster

pytestmark = pytest.mark.fault

PILOT = {"Site": "S1", "CPUTime": 10**7, "PilotReference": "outage-pilot"}
JOB = {"owner": "alice", "owner_group": "physics", "sites": ["S1"]}
ANSWER_WITHIN = 10  # seconds: an outage must be reported, not waited out
RECOVER_WITHIN = 15


@pytest.fixture
def server(cluster_db, tmp_path) -> Iterator[Server]:
    srv = start_server(cluster_db, tmp_path)
    yield srv
    srv.stop()


def assert_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["content-type"].startswith("application/problem+json"), response.headers
    assert int(response.headers["retry-after"]) > 0
    body = response.json()
    assert body["status"] == 503 and body["type"] == "urn:fairmatch:problem:database-unavailable", body


def wait_for(check, seconds: float) -> float:
    """Poll `check()` until it is true; the seconds it took. Fails when time runs out."""
    start = time.monotonic()
    while True:
        try:
            if check():
                return time.monotonic() - start
        except httpx.TransportError:
            pass
        if time.monotonic() - start > seconds:
            pytest.fail(f"not recovered within {seconds} s")
        time.sleep(0.1)


def test_database_outage_is_503_and_recovers(pg_cluster: PgCluster, server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=ANSWER_WITHIN, verify=False) as http:
        submitted = http.post("/api/v1/jobs", json={"jobs": [JOB] * 5})
        assert submitted.status_code == 201, submitted.text
        # pooled connections that the outage will leave stale
        for n in range(3):
            assert http.post("/api/v1/match", json={**PILOT, "request_id": f"before-{n}"}).status_code == 200

        pg_cluster.stop()
        for n in range(3):  # each on a connection the pool still believes in, then none
            ready = http.get("/readyz")
            assert ready.status_code == 503, ready.text
            assert int(ready.headers["retry-after"]) > 0
            assert_unavailable(http.post("/api/v1/match", json={**PILOT, "request_id": f"during-{n}"}))
            assert_unavailable(http.get("/api/v1/jobs/1"))
            assert_unavailable(http.post("/api/v1/jobs/1/status", json={"status": "Running"}))
            assert_unavailable(http.post("/api/v1/jobs", json={"jobs": [JOB]}))

        pg_cluster.start()
        took = wait_for(lambda: http.get("/readyz").status_code == 200, RECOVER_WITHIN)
        matched = http.post("/api/v1/match", json={**PILOT, "request_id": "after-0"})
        assert matched.status_code == 200, matched.text
        # the request that failed during the outage claimed nothing: it may claim now
        retried = http.post("/api/v1/match", json={**PILOT, "request_id": "during-0"})
        assert retried.status_code == 200, retried.text
        assert retried.json()["job_id"] != matched.json()["job_id"]
        assert http.get("/api/v1/jobs/1").status_code == 200
        print(f"\nrecovered {took:.2f} s after PostgreSQL was back")

    assert server.process.poll() is None, "the server died"
    assert "Traceback" not in server.log(), server.log()
