"""The `fairmatch` console script against a real server, over real HTTP.

Commands run as subprocesses with stdout piped, so they print JSON. The table
output and the batch splitting are checked in-process, where `stdout_is_tty` and
`BATCH_SIZE` can be replaced.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from fairmatch.cli import cli, render
from fairmatch.cli import jobs as job_commands
from fairmatch.cli.serve import client_url
from fairmatch.db import migrate
from tests.conftest import (
    BACKENDS,
    Server,
    create_pg_database,
    drop_pg_database,
    free_port,
    pg_url,
    wait_until_ready,
)

FAIRMATCH = Path(sys.executable).parent / "fairmatch"  # the console script of the running venv

JOB_A = {"owner": "alice", "owner_group": "g", "sites": ["S1"], "cpu_time": 3600}
JOB_GPU = {"owner": "bob", "owner_group": "g", "sites": ["S1"], "tags": ["GPU"], "cpu_time": 3600}
JOB_ELSEWHERE = {"owner": "carol", "owner_group": "g", "sites": ["S2"], "cpu_time": 3600}


@pytest.fixture
def fairmatch(cli_env, tmp_path) -> Callable[..., subprocess.CompletedProcess]:
    def run(*args: str, stdin: str | None = None, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(FAIRMATCH), *args], input=stdin, env={**cli_env, **env}, cwd=tmp_path,
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip

    return run


def succeeded(result: subprocess.CompletedProcess) -> dict:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def assert_failed(result: subprocess.CompletedProcess, code: int, *fragments: str) -> None:
    assert result.returncode == code, (result.stdout, result.stderr)
    assert result.stderr.startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in result.stderr


def unreachable_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


def submit_via_api(server: Server, *jobs: dict) -> list[dict]:
    with server.client() as client:
        r = client.post("/jobs", json={"jobs": list(jobs)})
    assert r.status_code == 201, r.text
    return r.json()["jobs"]


def get_job(server: Server, job_id: int) -> dict:
    with server.client() as client:
        r = client.get(f"/jobs/{job_id}")
    assert r.status_code == 200, r.text
    return r.json()


# --- submit -----------------------------------------------------------------


def test_submit_json_file_creates_the_jobs(fairmatch, server, clean, tmp_path):
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps([JOB_A, JOB_GPU]))

    answer = succeeded(fairmatch("submit", str(path), "--url", server.url))

    assert [job["status"] for job in answer["jobs"]] == ["Waiting", "Waiting"]
    created = [get_job(server, job["job_id"]) for job in answer["jobs"]]
    assert [(job["owner"], job["tags"]) for job in created] == [("alice", []), ("bob", ["GPU"])]
    assert [job["task_queue_id"] for job in created] == [job["task_queue_id"] for job in answer["jobs"]]


def test_submit_toml_file_creates_the_jobs(fairmatch, server, clean, tmp_path):
    path = tmp_path / "jobs.toml"
    path.write_text(
        '[[jobs]]\nowner = "alice"\nowner_group = "g"\nsites = ["S1"]\n'
        "payload = { due = 2026-01-02T03:04:05Z, n = 1 }\n"
        '[[jobs]]\nowner = "bob"\nowner_group = "g"\ncpu_time = 60\n'
    )

    answer = succeeded(fairmatch("submit", str(path), "--url", server.url))

    first, second = (get_job(server, job["job_id"]) for job in answer["jobs"])
    assert (first["owner"], first["sites"]) == ("alice", ["S1"])
    assert first["payload"] == {"due": "2026-01-02T03:04:05+00:00", "n": 1}  # TOML dates sent as ISO text
    assert (second["owner"], second["cpu_time"]) == ("bob", 60)


def test_submit_reads_json_from_stdin(fairmatch, server, clean):
    answer = succeeded(fairmatch("submit", "-", "--url", server.url, stdin=json.dumps({"jobs": [JOB_A]})))

    assert get_job(server, answer["jobs"][0]["job_id"])["status"] == "Waiting"


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("missing.json", None, "cannot read"),
        ("broken.json", "{not json", "not valid JSON"),
        ("broken.toml", "jobs = [", "not valid TOML"),
        ("typo.json", '{"job": []}', "expected only a 'jobs' list"),
        ("scalar.json", '"alice"', "expected a list of jobs"),
        ("nothing.toml", "", "found: nothing"),
        ("none.json", "[]", "contains no jobs"),
        ("numbers.json", "[1]", "job 1 is a int"),
        ("jobs.yaml", "jobs: []", "must end in .json or .toml"),
    ],
)
def test_a_bad_file_is_refused_before_any_request(fairmatch, tmp_path, name, content, message):
    path = tmp_path / name
    if content is not None:
        path.write_text(content)

    # an unreachable service would fail with 1: 2 shows the file was refused first
    assert_failed(fairmatch("submit", str(path), "--url", unreachable_url()), 2, message)


def test_a_job_the_server_refuses_exits_1_with_the_problem_detail(fairmatch, server, clean, tmp_path):
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps([JOB_A, {**JOB_A, "cpu_time": -1}]))

    result = fairmatch("submit", str(path), "--url", server.url)

    assert_failed(result, 1, "error: Invalid input: body.jobs.1.cpu_time")
    with server.client() as client:
        assert client.get("/jobs").json()["jobs"] == []  # all or nothing


# --- taskqueues and match ---------------------------------------------------


def test_taskqueues_lists_the_queues_of_submitted_jobs(fairmatch, server, clean):
    submitted = submit_via_api(server, JOB_A, JOB_A, JOB_GPU)

    answer = succeeded(fairmatch("taskqueues", "--url", server.url))

    queues = {tq["task_queue_id"]: tq for tq in answer["task_queues"]}
    assert set(queues) == {job["task_queue_id"] for job in submitted}
    assert sorted((tq["owner"], tq["jobs"]) for tq in queues.values()) == [("alice", 2), ("bob", 1)]


def test_match_shows_the_eligible_queues_and_claims_nothing(fairmatch, server, clean):
    plain, gpu, elsewhere = submit_via_api(server, JOB_A, JOB_GPU, JOB_ELSEWHERE)

    resource = ["--site", "S1", "--cpu-time", "100000", "--tag", "GPU", "--tag", "SSD"]
    answer = succeeded(fairmatch("match", *resource, "--url", server.url))

    queues = {tq["task_queue_id"]: tq["probability"] for tq in answer["task_queues"]}
    assert set(queues) == {plain["task_queue_id"], gpu["task_queue_id"]}
    assert sum(queues.values()) == pytest.approx(1)
    for job in (plain, gpu, elsewhere):
        assert get_job(server, job["job_id"])["status"] == "Waiting"


def test_match_honours_the_resource_options(fairmatch, server, clean):
    plain, _ = submit_via_api(server, JOB_A, JOB_GPU)

    untagged = succeeded(fairmatch("match", "--site", "S1", "--cpu-time", "100000", "--url", server.url))
    too_short = succeeded(fairmatch("match", "--site", "S1", "--cpu-time", "60", "--url", server.url))

    assert [tq["task_queue_id"] for tq in untagged["task_queues"]] == [plain["task_queue_id"]]
    assert untagged["task_queues"][0]["probability"] == pytest.approx(1)
    assert too_short["task_queues"] == []
    # the JSON carries the analysis: every queue is too long for a 60 s slot, the GPU one lacks its tag
    assert too_short["analysis"]["rejected_by"]["cpu_time"] == 2 and too_short["analysis"]["eligible"] == 0
    assert untagged["analysis"]["rejected_by"]["tags"] == 1 and untagged["analysis"]["eligible"] == 1


# --- pilots -------------------------------------------------------------------


def test_pilots_list_and_show_a_pilot_named_by_a_url(fairmatch, server, clean):
    [job] = submit_via_api(server, JOB_A)
    reference = "https://ce.example.org:9619/123.0"
    with server.client() as client:
        body = {"Site": "S1", "CPUTime": 100000, "GridCE": "ce.example.org", "PilotReference": reference}
        assert client.post("/match", json=body).status_code == 200

    listed = succeeded(fairmatch("pilots", "list", "--site", "S1", "--url", server.url))
    shown = succeeded(fairmatch("pilots", "show", reference, "--url", server.url))
    only = succeeded(fairmatch("pilots", "list", "--reference", reference, "--limit", "5", "--url", server.url))

    assert [p["reference"] for p in listed["pilots"]] == [reference] and listed["next_cursor"] is None
    assert (shown["reference"], shown["grid_ce"], shown["matches"]) == (reference, "ce.example.org", 1)
    assert shown["job_ids"] == [job["job_id"]] and shown["current_job_id"] == job["job_id"]
    assert only["pilots"] == listed["pilots"]
    assert_failed(fairmatch("pilots", "show", "https://ce.example.org:9619/999.0", "--url", server.url), 1,
                  "not on record")  # fmt: skip


def test_format_chooses_tables_or_json_whatever_stdout_is(fairmatch, server, clean):
    submit_via_api(server, JOB_A)
    args = ["taskqueues", "--url", server.url]

    piped = fairmatch(*args)  # stdout is a pipe: JSON unless asked
    assert [tq["owner"] for tq in succeeded(piped)["task_queues"]] == ["alice"]
    assert succeeded(fairmatch("--format", "json", *args)) == succeeded(piped)

    table = fairmatch("--format", "table", *args, COLUMNS="200")
    assert table.returncode == 0, table.stderr
    assert "Task queues" in table.stdout and "alice" in table.stdout
    assert table.stdout.splitlines()[2].split()[:3] == ["id", "owner", "group"]
    with pytest.raises(json.JSONDecodeError):
        json.loads(table.stdout)
    assert_failed(fairmatch("--format", "yaml", *args), 2, "yaml")


def test_a_refused_resource_exits_1_with_the_problem_detail(fairmatch, server, clean):
    resource = ["--site", "S1", "--cpu-time", "10", "--required-tag", "GPU"]
    result = fairmatch("match", *resource, "--url", server.url)

    assert_failed(result, 1, "error: Bad request: required_tags must be a subset of tags")


def test_an_unreachable_service_exits_1_naming_the_url(fairmatch):
    url = unreachable_url()

    assert_failed(fairmatch("taskqueues", FAIRMATCH_URL=url), 1, f"cannot connect to fairmatch at {url}")


# --- in-process: tables and batches -----------------------------------------


@pytest.fixture
def invoke(monkeypatch) -> Callable[..., object]:
    monkeypatch.setenv("COLUMNS", "200")  # one table row per line
    runner = CliRunner()
    return lambda *args: runner.invoke(cli, list(args), catch_exceptions=False)


def test_a_terminal_gets_tables(invoke, monkeypatch, server, clean):
    monkeypatch.setattr(render, "stdout_is_tty", lambda: True)
    submit_via_api(server, JOB_A, {**JOB_GPU, "sites": ["S1", "S2", "S3", "S4", "S5"]})

    result = invoke("match", "--site", "S1", "--cpu-time", "100000", "--tag", "GPU", "--url", server.url)

    assert result.exit_code == 0, result.stderr
    assert "Task queues eligible at S1" in result.stdout
    assert "probability" in result.stdout and "50.0%" in result.stdout
    assert "S1, S2, S3 (+2)" in result.stdout
    with pytest.raises(json.JSONDecodeError):
        json.loads(result.stdout)


def test_a_terminal_gets_the_analysis_and_the_most_restrictive_condition(invoke, monkeypatch, server, clean):
    monkeypatch.setattr(render, "stdout_is_tty", lambda: True)
    submit_via_api(server, JOB_A, JOB_GPU, JOB_ELSEWHERE)

    result = invoke("match", "--site", "S1", "--cpu-time", "60", "--tag", "GPU", "--url", server.url)

    assert result.exit_code == 0, result.stderr
    shown = " ".join(result.stdout.split())  # titles and captions wrap to the table's width
    assert "Why: queues rejected" in shown and "cpu_time 3" in shown
    assert "0 of 3 queues with jobs eligible" in shown
    assert "Nothing is eligible; the most restrictive condition is cpu_time, which rejects 3 of 3 task queues." in shown


def test_match_takes_several_sites_and_a_slot_memory(invoke, monkeypatch, server, clean):
    monkeypatch.setattr(render, "stdout_is_tty", lambda: False)
    plain, elsewhere, big = submit_via_api(server, JOB_A, JOB_ELSEWHERE, {**JOB_A, "min_ram_mb": 16000})

    both = ["match", "--site", "S1", "--site", "S2", "--cpu-time", "100000", "--url", server.url]
    result = invoke(*both)
    assert result.exit_code == 0, result.stderr
    listed = {tq["task_queue_id"] for tq in json.loads(result.stdout)["task_queues"]}
    assert listed == {plain["task_queue_id"], elsewhere["task_queue_id"], big["task_queue_id"]}

    result = invoke(*both, "--max-ram-mb", "8000")
    assert result.exit_code == 0, result.stderr
    answer = json.loads(result.stdout)
    assert {tq["task_queue_id"] for tq in answer["task_queues"]} == listed - {big["task_queue_id"]}
    assert answer["analysis"]["rejected_by"]["ram"] == 1
    monkeypatch.setattr(render, "stdout_is_tty", lambda: True)
    assert "Task queues eligible at S1, S2" in invoke(*both).stdout


def test_large_submissions_go_in_batches(invoke, monkeypatch, server, clean, tmp_path):
    monkeypatch.setattr(job_commands, "BATCH_SIZE", 2)
    monkeypatch.setattr(render, "stdout_is_tty", lambda: False)
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps([JOB_A] * 5))

    result = invoke("submit", str(path), "--url", server.url)

    assert result.exit_code == 0, result.stderr
    assert len(json.loads(result.stdout)["jobs"]) == 5
    assert "batch 3/3 (jobs 5-5) queued: 5/5 jobs" in result.stderr


def test_a_failed_batch_leaves_the_batches_before_it_queued(invoke, monkeypatch, server, clean, tmp_path):
    monkeypatch.setattr(job_commands, "BATCH_SIZE", 2)
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps([JOB_A, JOB_A, JOB_A, {**JOB_A, "user_priority": 99}, JOB_A]))

    result = invoke("submit", str(path), "--url", server.url)

    assert result.exit_code == 1
    assert "error: Invalid input: body.jobs.1.user_priority" in result.stderr
    assert "batch 2/3 (jobs 3-4) failed; the 2 jobs before it stay queued" in result.stderr
    with server.client() as client:
        assert len(client.get("/jobs").json()["jobs"]) == 2


# --- db and serve -----------------------------------------------------------


def test_db_upgrade_and_current_on_a_fresh_sqlite_file(fairmatch, tmp_path):
    path = tmp_path / "fresh.db"
    url = f"sqlite:///{path}"
    head = migrate.head_revision(url)

    before = fairmatch("db", "current", FAIRMATCH_DATABASE_URL=url)
    upgraded = fairmatch("db", "upgrade", FAIRMATCH_DATABASE_URL=url)
    after = fairmatch("db", "current", FAIRMATCH_DATABASE_URL=url)
    again = fairmatch("db", "upgrade", FAIRMATCH_DATABASE_URL=url)

    assert before.returncode == 0 and f"at none, head is {head}" in before.stdout
    assert upgraded.returncode == 0 and f"upgraded from none to {head}" in upgraded.stdout
    assert after.returncode == 0 and f"at {head} (head, up to date)" in after.stdout
    assert again.returncode == 0 and f"already at {head}" in again.stdout
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [(head,)]


def test_db_upgrade_refuses_an_unknown_revision(fairmatch, tmp_path):
    url = f"sqlite:///{tmp_path}/x.db"
    result = fairmatch("db", "upgrade", "--revision", "nope", FAIRMATCH_DATABASE_URL=url)

    assert_failed(result, 2, "cannot upgrade to 'nope'")


def test_serve_migrates_a_fresh_sqlite_file_and_answers(cli_env, tmp_path):
    port = free_port()
    env = {**cli_env, "FAIRMATCH_DATABASE_URL": f"sqlite:///{tmp_path}/served.db"}
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(FAIRMATCH), "serve", "--port", str(port)], env=env, cwd=tmp_path, stdout=out, stderr=out
        )
    try:
        assert wait_until_ready(f"http://127.0.0.1:{port}", process), log.read_text()
        # the line serve prints is the one that points the client commands at it
        (line,) = [ln for ln in log.read_text().splitlines() if "export FAIRMATCH_URL=" in ln]
        assert line.endswith(f"export FAIRMATCH_URL=http://127.0.0.1:{port}"), line
        url = line.split("FAIRMATCH_URL=", 1)[1]
        listed = subprocess.run([str(FAIRMATCH), "jobs", "list"], env={**env, "FAIRMATCH_URL": url},
                                cwd=tmp_path, capture_output=True, text=True, timeout=30)  # fmt: skip
        assert listed.returncode == 0 and json.loads(listed.stdout)["jobs"] == [], listed.stderr
    finally:
        process.terminate()
        process.wait(timeout=10)
    output = log.read_text()
    assert "upgraded from none to" in output
    assert f"fairmatch listening on http://127.0.0.1:{port}" in output


@pytest.mark.parametrize(("host", "port", "url"), [("0.0.0.0", 8765, "http://127.0.0.1:8765"),
                                                   ("::", 9000, "http://[::1]:9000"),
                                                   ("10.1.2.3", 8000, "http://10.1.2.3:8000")])  # fmt: skip
def test_serve_names_the_url_a_client_on_this_machine_uses(host, port, url):
    assert client_url(host, port) == url


@pytest.mark.skipif("postgresql" not in BACKENDS, reason="PostgreSQL is not among the test backends")
def test_serve_refuses_an_unmigrated_postgresql_without_a_traceback(fairmatch):
    name = create_pg_database()
    try:
        result = fairmatch("serve", "--port", str(free_port()), FAIRMATCH_DATABASE_URL=pg_url(name))
    finally:
        drop_pg_database(name)

    assert_failed(result, 1, "is at schema revision none", "run `fairmatch db upgrade`")


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"FAIRMATCH_SERVER__PORT": "0"}, "invalid settings: FAIRMATCH_SERVER__PORT: Input should be greater"),
        ({"FAIRMATCH_CONFIG": "/nonexistent/fairmatch.toml"}, "invalid settings: FAIRMATCH_CONFIG"),
        ({"FAIRMATCH_DATABASE_URL": "mysql://db/fairmatch"}, "unsupported database URL scheme"),
        # settings that would silently do nothing
        (
            {"FAIRMATCH_PRIORITY__POLICY": "rank", "FAIRMATCH_PRIORITY__CORRECTIONS_ENABLED": "true"},
            "share corrections are applied by the dirac policy only",
        ),
        (
            {"FAIRMATCH_PRIORITY__POLICY": "multifactor", "FAIRMATCH_MATCHING__PREFER_LONGEST_CPU": "true"},
            "priority.multifactor.weights.job_size = 100 has no effect while matching.prefer_longest_cpu = true",
        ),
        ({"FAIRMATCH_PRIORITY__RANK__WINDOW_DAYS": "3"}, "[priority.rank] is read by the rank policy only"),
    ],
    ids=[
        "bad-port",
        "missing-config",
        "bad-database-url",
        "corrections-without-dirac",
        "job-size-under-longest-cpu",
        "rank-section-under-dirac",
    ],
)
def test_serve_refuses_invalid_settings(fairmatch, env, message):
    assert_failed(fairmatch("serve", **env), 2, message)


def test_serve_stops_at_a_variable_that_names_no_setting(fairmatch):
    """A misspelt FAIRMATCH_ variable stops the start, named with the setting it probably meant;
    the project's own variables that are not settings pass."""
    result = fairmatch("serve", "--port", str(free_port()), FAIRMATCH_MATCHING__LOTTERIE="dirac",
                       FAIRMATCH_TEST_UNRELATED="1", FAIRMATCH_URL="http://127.0.0.1:1")  # fmt: skip
    assert_failed(result, 2, "invalid settings: FAIRMATCH_MATCHING__LOTTERIE names no setting"
                             " (did you mean FAIRMATCH_MATCHING__LOTTERY?)")  # fmt: skip
    assert "Traceback" not in result.stderr
    assert "FAIRMATCH_TEST_UNRELATED" not in result.stderr and "FAIRMATCH_URL" not in result.stderr


def _serve(env: dict, tmp_path: Path, *args: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    log = (tmp_path / f"serve-{port}.log").open("wb")
    process = subprocess.Popen([str(FAIRMATCH), "serve", "--port", str(port), *args], env=env, cwd=tmp_path,
                               stdout=log, stderr=log)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    assert wait_until_ready(url, process, seconds=30), (tmp_path / f"serve-{port}.log").read_text()
    return process, url


@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_counts_matches_in_its_metrics_with_one_worker_or_more(cli_env, tmp_path, workers):
    """One worker (the default) serves in the process that prepared the metrics directory."""
    env = {**cli_env, "FAIRMATCH_DATABASE_URL": f"sqlite:///{tmp_path}/served.db", "TMPDIR": str(tmp_path)}
    process, url = _serve(env, tmp_path, "--workers", workers)
    try:
        for _ in range(3):
            assert httpx.post(f"{url}/api/v1/match", json={"Site": "S1", "CPUTime": 100}).status_code == 204
        text = httpx.get(f"{url}/metrics").text
    finally:
        process.terminate()
        process.wait(timeout=20)
    assert 'fairmatch_match_requests_total{result="no_match"} 3.0' in text, text[:2000]
    assert "fairmatch_match_duration_seconds_count 3.0" in text


@pytest.mark.parametrize("configured", [False, True], ids=["made-by-serve", "configured"])
@pytest.mark.parametrize(
    ("workers", "stop"),
    [("1", signal.SIGTERM), ("1", signal.SIGINT), ("2", signal.SIGTERM)],
    ids=["one-worker-sigterm", "one-worker-sigint", "two-workers-sigterm"],
)
def test_a_clean_stop_removes_the_metrics_directory_serve_made_and_keeps_a_configured_one(
    cli_env, tmp_path, configured, workers, stop
):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**cli_env, "FAIRMATCH_DATABASE_URL": f"sqlite:///{tmp_path}/served.db", "TMPDIR": str(scratch)}
    kept = tmp_path / "metrics"
    if configured:
        env["FAIRMATCH_SERVER__METRICS_DIR"] = str(kept)
    process, url = _serve(env, tmp_path, "--workers", workers)
    assert httpx.post(f"{url}/api/v1/match", json={"Site": "S1", "CPUTime": 100}).status_code == 204
    made = list(scratch.glob("fairmatch-metrics-*"))
    assert len(made) == (0 if configured else 1)
    process.send_signal(stop)
    assert process.wait(timeout=20) == 0  # a clean stop
    assert list(scratch.glob("fairmatch-metrics-*")) == []
    assert kept.is_dir() == configured


def test_match_takes_the_gpus_a_slot_offers_and_the_reference_lists_the_option(invoke, monkeypatch, server, clean):
    monkeypatch.setattr(render, "stdout_is_tty", lambda: False)
    plain, gpu = submit_via_api(server, JOB_A, {**JOB_A, "number_of_gpus": 2})
    slot = ["match", "--site", "S1", "--cpu-time", "100000", "--url", server.url]
    for offered, expected in (((), {plain["task_queue_id"]}), (("--gpus", "1"), {plain["task_queue_id"]}),
                              (("--gpus", "2"), {plain["task_queue_id"], gpu["task_queue_id"]})):  # fmt: skip
        result = invoke(*slot, *offered)
        assert result.exit_code == 0, result.stderr
        answer = json.loads(result.stdout)
        assert {tq["task_queue_id"] for tq in answer["task_queues"]} == expected, offered
        assert answer["analysis"]["rejected_by"]["gpus"] == 2 - len(expected)
    assert invoke(*slot, "--gpus", "-1").exit_code != 0
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "docs" / "hooks"))
    from cli_reference import markdown

    assert "| `--gpus <int range>` | GPUs of the slot (queues needing more are not eligible). [x&gt;=0] |" in (
        markdown().splitlines()
    )
