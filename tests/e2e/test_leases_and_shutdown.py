"""Unconfirmed matches return to Waiting; SIGTERM lets in-flight work finish."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time

import pytest

from tests.conftest import REPO, free_port, wait_until_ready


def wait_for(predicate, seconds: float = 10, step: float = 0.1):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return predicate()


def test_a_match_never_confirmed_returns_to_waiting_after_its_lease(server_factory, clean):
    server = server_factory(JOBS__MATCHED_LEASE_SECONDS="1", JOBS__LEASE_SWEEP_SECONDS="0.3")
    with server.client() as api:
        ids = [
            j["job_id"]
            for j in api.post("/jobs", json={"jobs": [{"owner": "a", "owner_group": "g"}] * 2}).json()["jobs"]
        ]
        confirmed = api.post("/match", json={"Site": "S", "CPUTime": 10**6}).json()["job_id"]
        forgotten = api.post("/match", json={"Site": "S", "CPUTime": 10**6}).json()["job_id"]
        assert {confirmed, forgotten} == set(ids)
        assert api.post(f"/jobs/{confirmed}/status", json={"status": "Running"}).status_code == 200

        back = wait_for(lambda: api.get(f"/jobs/{forgotten}").json()["status"] == "Waiting", seconds=10)
        assert back, api.get(f"/jobs/{forgotten}").json()
        job = api.get(f"/jobs/{forgotten}").json()
        assert job["site"] is None and job["lease_expires_at"] is None
        assert job["minor_status"] == "matched lease expired"
        assert api.get(f"/jobs/{confirmed}").json()["status"] == "Running"
        again = api.post("/match", json={"Site": "S", "CPUTime": 10**6})
        assert again.json()["job_id"] == forgotten
        assert job["reschedules"] == 1 and again.json()["reschedules"] == 1
        assert api.get(f"/jobs/{confirmed}").json()["reschedules"] == 0
    with clean.engine().connect() as conn:
        sources = conn.exec_driver_sql(
            f"SELECT status, source FROM job_events WHERE job_id = {int(forgotten)} ORDER BY id"
        ).all()
    assert [tuple(r) for r in sources] == [
        ("Waiting", "submit"),
        ("Matched", "match"),
        ("Waiting", "lease"),
        ("Matched", "match"),
    ]


def _raw_post(port: int, path: str, document: dict) -> socket.socket:
    """Send a whole HTTP request and return the socket, its answer still to read."""
    body = json.dumps(document).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    sock.sendall(head + body)
    return sock


def _read_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    sock.close()
    return b"".join(chunks)


@pytest.mark.timeout(120)
def test_sigterm_finishes_the_request_in_flight_and_exits(database, clean, tmp_path):
    config = tmp_path / "empty.toml"
    config.write_text("")
    port = free_port()
    env = {"PATH": "/usr/bin:/bin", "FAIRMATCH_CONFIG": str(config), "FAIRMATCH_DATABASE_URL": database.url}
    log = (tmp_path / "serve.log").open("wb")
    process = subprocess.Popen(
        [str(REPO / ".venv/bin/fairmatch"), "serve", "--port", str(port)],
        env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        assert wait_until_ready(f"http://127.0.0.1:{port}", process, seconds=30)
        jobs = [{"owner": "a", "owner_group": "g", "sites": [f"S{i % 50}"]} for i in range(10_000)]
        sock = _raw_post(port, "/api/v1/jobs", {"jobs": jobs})
        time.sleep(0.3)  # the server is parsing and queueing the batch now
        process.send_signal(signal.SIGTERM)
        answer = _read_all(sock)
        # uvicorn re-raises SIGTERM once its graceful shutdown is complete
        assert process.wait(timeout=60) in (0, -signal.SIGTERM)
    finally:
        if process.poll() is None:
            process.kill()
        log.close()
    output = (tmp_path / "serve.log").read_text()
    # the signal came while the batch was in flight, and it was answered before the exit
    answered = output.index('"message":"POST /api/v1/jobs 201"')  # the service's JSON access line
    assert output.index("Shutting down") < answered < output.index("Application shutdown complete")
    assert "Traceback" not in output
    status_line, _, rest = answer.partition(b"\r\n")
    assert b" 201 " in status_line, answer[:500]
    body = json.loads(rest.split(b"\r\n\r\n", 1)[1])
    assert len(body["jobs"]) == 10_000
    with clean.engine().connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM jobs").scalar() == 10_000
        assert conn.exec_driver_sql("SELECT count(*) FROM tq_jobs").scalar() == 10_000
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_a_late_replay_of_a_voided_match_does_not_return_the_job(client):
    """Once a job went back to Waiting, its old request id no longer names it."""
    job = client.post("/jobs", json={"jobs": [{"owner": "a", "owner_group": "g"}]}).json()["jobs"][0]["job_id"]
    resource = {"Site": "S", "CPUTime": 10**6}
    assert client.post("/match", json={**resource, "request_id": "r1"}).json()["job_id"] == job
    assert client.post(f"/jobs/{job}/status", json={"status": "Waiting"}).status_code == 200
    assert client.post("/match", json={**resource, "request_id": "r2"}).json()["job_id"] == job
    late = client.post("/match", json={**resource, "request_id": "r1"})
    assert late.status_code == 204, late.text


def test_after_max_reschedules_a_job_fails_instead_of_returning(private_server_factory, private_database):
    """DIRAC's MaxRescheduling: the returns its owner did not ask for are counted; the
    one past jobs.max_reschedules fails the job. The owner's own reschedule does not count.
    On a database of its own: a session server sweeping the lapsed lease first would apply
    its own max_reschedules (3) and return the job once more."""
    server = private_server_factory(JOBS__MATCHED_LEASE_SECONDS="1", JOBS__LEASE_SWEEP_SECONDS="0.2",
                                    JOBS__MAX_RESCHEDULES="2")  # fmt: skip
    pilot = {"Site": "S", "CPUTime": 10**6}
    with server.client() as api:
        (job_id,) = [
            j["job_id"] for j in api.post("/jobs", json={"jobs": [{"owner": "a", "owner_group": "g"}]}).json()["jobs"]
        ]
        assert api.post("/match", json=pilot).json()["job_id"] == job_id
        assert api.post(f"/jobs/{job_id}/status", json={"status": "Waiting"}).json()["reschedules"] == 0
        for expected in (1, 2):
            assert api.post("/match", json=pilot).json()["job_id"] == job_id
            assert wait_for(lambda: api.get(f"/jobs/{job_id}").json()["status"] == "Waiting", seconds=10)
            assert api.get(f"/jobs/{job_id}").json()["reschedules"] == expected
        assert api.post("/match", json=pilot).json()["job_id"] == job_id
        assert wait_for(lambda: api.get(f"/jobs/{job_id}").json()["status"] == "Failed", seconds=10)
        job = api.get(f"/jobs/{job_id}").json()
        assert job["minor_status"] == "Maximum of reschedulings reached" and job["reschedules"] == 2
        assert job["finished_at"] is not None
        assert api.post("/match", json=pilot).status_code == 204  # out of the queues for good
    with private_database.engine().connect() as conn:
        last = conn.exec_driver_sql(
            f"SELECT status, source FROM job_events WHERE job_id = {int(job_id)} ORDER BY id DESC LIMIT 1"
        ).one()
    assert tuple(last) == ("Failed", "lease")
