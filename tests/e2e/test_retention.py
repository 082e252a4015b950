"""Retention against real servers: the background purge with its archive, GET /status and the
metric, and `fairmatch jobs purge` over POST /jobs/purge. Each test has its own database, so
that its purge deletes no other test's rows."""

from __future__ import annotations

import gzip
import io
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import orjson
import pytest
import sqlalchemy as sa
from rich.console import Console

from fairmatch.cli.jobs import purged_table
from fairmatch.cli.status import status_screen
from fairmatch.clock import utcnow
from fairmatch.db.tables import jobs
from tests.conftest import Server, TestDatabase
from tests.e2e.test_cli import assert_failed, succeeded
from tests.in_process import run_fairmatch
from tests.problems import assert_problem

PILOT = {"Site": "S1", "CPUTime": 100_000}


def submit(server: Server, count: int, **spec: Any) -> list[int]:
    job = {"owner": "alice", "owner_group": "g", "sites": ["S1"], "cpu_time": 3600, **spec}
    with server.client() as client:
        r = client.post("/jobs", json={"jobs": [job] * count})
    assert r.status_code == 201, r.text
    return [j["job_id"] for j in r.json()["jobs"]]


def finish(server: Server, status: str) -> int:
    (job_id,) = submit(server, 1)
    with server.client() as client:
        r = client.post("/match", json={**PILOT, "JobID": job_id})
        assert r.status_code == 200, r.text
        if status == "Killed":
            assert client.delete(f"/jobs/{job_id}").status_code == 200
            return job_id
        for reported in ("Running", status):
            r = client.post(f"/jobs/{job_id}/status", json={"status": reported, "cpu_seconds": 10})
            assert r.status_code == 200, r.text
    return job_id


def until(condition: Callable[[], Any], seconds: float = 30) -> Any:
    """Poll `condition` until it returns something true; fail after `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.1)
    pytest.fail(f"not within {seconds} s")


def last_purge(server: Server) -> dict | None:
    with server.client() as client:
        r = client.get("/status")
    assert r.status_code == 200, r.text
    return r.json()["last_purge"]


def test_the_background_purge_archives_and_deletes_finished_jobs_and_says_so(
    private_server_factory, private_database, tmp_path, cli_env
):
    archive = tmp_path / "archive"
    server = private_server_factory(RETENTION__DONE_DAYS="0.00002", RETENTION__INTERVAL_SECONDS="0.2",
                                    RETENTION__ARCHIVE_DIR=str(archive))  # fmt: skip
    done = finish(server, "Done")
    (waiting,) = submit(server, 1, sites=["elsewhere"])

    purged = until(lambda: (run := last_purge(server)) and run["jobs"]["Done"] and run)
    assert (purged["jobs"], purged["archived"], purged["error"]) == (
        {"Done": 1, "Failed": 0, "HandedOff": 0, "Killed": 0},
        1,
        None,
    )
    with server.client() as client:
        assert client.get(f"/jobs/{done}").status_code == 404
        assert client.get(f"/jobs/{waiting}").json()["status"] == "Waiting"
        metrics = client.get(f"{server.url}/metrics").text
    assert 'fairmatch_jobs_purged_total{status="Done"} 1.0' in metrics
    (archive_file,) = archive.iterdir()
    with gzip.open(archive_file) as stream:
        (line,) = [orjson.loads(text) for text in stream]
    assert (line["job"]["id"], line["job"]["status"]) == (done, "Done")
    assert [e["status"] for e in line["events"]] == ["Waiting", "Matched", "Running", "Done"]

    # fairmatch status: the document as JSON when piped, and its screen
    document = succeeded(run_fairmatch("status", "--url", server.url, env=cli_env, cwd=tmp_path))
    assert document["last_purge"].keys() == purged.keys()  # a later run, which found nothing more
    screen = io.StringIO()
    Console(file=screen, width=160).print(status_screen({**document, "last_purge": purged}))
    assert "Last purge" in screen.getvalue() and "Done 1" in screen.getvalue()


def age_finished_jobs(db: TestDatabase, hours: float) -> None:
    engine = db.engine()
    with engine.begin() as conn:
        finished = jobs.c.finished_at.isnot(None)
        conn.execute(sa.update(jobs).where(finished).values(finished_at=utcnow() - timedelta(hours=hours)))
    engine.dispose()


def test_jobs_purge_counts_then_deletes_the_final_jobs_asked_for(private_server_factory, private_database, tmp_path,
                                                                 cli_env):  # fmt: skip
    server = private_server_factory(RETENTION__ENABLED="false")
    done = [finish(server, "Done") for _ in range(2)]
    failed, killed = finish(server, "Failed"), finish(server, "Killed")
    running = submit(server, 1)[0]
    with server.client() as client:
        assert client.post("/match", json=PILOT).json()["job_id"] == running
        assert client.post(f"/jobs/{running}/status", json={"status": "Running"}).status_code == 200
    age_finished_jobs(private_database, hours=2)

    def purge(*args: str) -> dict:
        return succeeded(run_fairmatch("jobs", "purge", *args, "--yes", "--url", server.url, env=cli_env, cwd=tmp_path))

    assert purge("--older-than", "3h")["jobs"] == {"Done": 0, "Failed": 0, "HandedOff": 0, "Killed": 0}
    counted = purge("--older-than", "90m", "--status", "done", "--status", "Killed", "--dry-run")
    assert (counted["dry_run"], counted["jobs"]) == (True, {"Done": 2, "Killed": 1})
    with server.client() as client:
        assert all(client.get(f"/jobs/{job_id}").status_code == 200 for job_id in [*done, failed, killed])

    purged = purge("--older-than", "90m", "--status", "Done", "--status", "Killed")
    assert (purged["dry_run"], purged["jobs"], purged["archived"]) == (False, {"Done": 2, "Killed": 1}, 0)
    screen = io.StringIO()
    Console(file=screen, width=120).print(purged_table(purged))
    assert "Jobs deleted" in screen.getvalue() and "0 archived" in screen.getvalue()
    assert purge("--older-than", "0.05d")["jobs"] == {"Done": 0, "Failed": 1, "HandedOff": 0, "Killed": 0}
    with server.client() as client:
        assert [client.get(f"/jobs/{job_id}").status_code for job_id in [*done, failed, killed]] == [404] * 4
        assert client.get(f"/jobs/{running}").json()["status"] == "Running"  # never a job that is not final
    assert last_purge(server)["jobs"] == {"Done": 0, "Failed": 1, "HandedOff": 0, "Killed": 0}

    bad = run_fairmatch("jobs", "purge", "--older-than", "3 weeks", "--url", server.url, env=cli_env, cwd=tmp_path)
    assert_failed(bad, 2, "not a duration such as 90m, 12h or 3d")
    bad = run_fairmatch("jobs", "purge", "--older-than", "1h", "--status", "Running", "--url", server.url,
                        env=cli_env, cwd=tmp_path)  # fmt: skip
    assert_failed(bad, 2, "Done, Failed, Killed")


@pytest.mark.parametrize(
    "body, where",
    [
        ({"older_than_seconds": 0.5}, ["body", "older_than_seconds"]),
        ({"older_than_seconds": 1e300}, ["body", "older_than_seconds"]),
        ({}, ["body", "older_than_seconds"]),
        ({"older_than_seconds": 60, "statuses": ["Waiting"]}, ["body", "statuses", 0]),
        ({"older_than_seconds": 60, "statuses": []}, ["body", "statuses"]),
        ({"older_than_seconds": 60, "dry": True}, ["body", "dry"]),
    ],
)
def test_a_purge_with_bad_values_is_a_422_and_only_admins_purge(as_role, body, where):
    admin, user = as_role("admin"), as_role("user")
    body_problem = assert_problem(admin.post("/jobs/purge", json=body), 422)
    assert any(e["loc"][: len(where)] == where for e in body_problem["errors"]), body_problem["errors"]
    assert_problem(user.post("/jobs/purge", json={"older_than_seconds": 60}), 403)
    assert_problem(as_role("operator").post("/jobs/purge", json={"older_than_seconds": 60}), 403)
