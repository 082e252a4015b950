"""The `fairmatch` command line against real servers, over real HTTP.

Client commands run through the console script's `main()` in this process
(tests/in_process.py: their own environment, directory, stdin and piped output,
so they print the server's JSON); the installed console script itself runs as a
subprocess where the process is the subject: one submission end to end, `db`,
and `serve` (its start, its refusals, its metrics directory and its stop).
Tables, progress bars and paging are checked with CliRunner, where
`stdout_is_tty`, `stderr_is_tty` and the sizes can be replaced. Token-mode
commands run against `token_server`.
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

from fairmatch.auth.tokens import Role, create_token
from fairmatch.cli import cli, render
from fairmatch.cli import jobs as job_commands
from fairmatch.cli.serve import client_url
from fairmatch.db import migrate
from tests.conftest import (
    BACKENDS,
    TOKEN_SETTINGS,
    Server,
    create_pg_database,
    drop_pg_database,
    free_port,
    pg_url,
    wait_until_ready,
)
from tests.in_process import run_fairmatch

FAIRMATCH = Path(sys.executable).parent / "fairmatch"  # the console script of the running venv

JOB = {"owner": "alice", "owner_group": "g", "sites": ["S1"], "cpu_time": 3600}
JOB_GPU = {"owner": "bob", "owner_group": "g", "sites": ["S1"], "tags": ["GPU"], "cpu_time": 3600}
JOB_ELSEWHERE = {"owner": "carol", "owner_group": "g", "sites": ["S2"], "cpu_time": 3600}
OTHER = {"owner": "bob", "owner_group": "h", "sites": ["S1"], "cpu_time": 3600}
PILOT = {"Site": "S1", "CPUTime": 100_000}


@pytest.fixture
def fairmatch(cli_env, tmp_path) -> Callable[..., subprocess.CompletedProcess]:
    """Run the installed console script."""

    def run(*args: str, stdin: str | None = None, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(FAIRMATCH), *args], input=stdin, env={**cli_env, **env}, cwd=tmp_path,
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip

    return run


@pytest.fixture
def run(cli_env, tmp_path) -> Callable[..., subprocess.CompletedProcess]:
    """Run `fairmatch ARGS` in this process, as the console script would."""

    def run(*args: str, stdin: str | None = None, **env: str) -> subprocess.CompletedProcess:
        return run_fairmatch(*args, env={**cli_env, **env}, cwd=tmp_path, stdin=stdin)

    return run


@pytest.fixture
def at(server, clean, run) -> Callable[..., dict]:
    """Run a command against the default server; its JSON answer."""
    return lambda *args, **kw: succeeded(run(*args, "--url", server.url, **kw))


@pytest.fixture
def invoke(monkeypatch) -> Callable[..., object]:
    monkeypatch.setenv("COLUMNS", "200")  # one table row per line
    monkeypatch.setattr(render, "stdout_is_tty", lambda: False)
    runner = CliRunner()
    return lambda *args: runner.invoke(cli, list(args), catch_exceptions=False)


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


def match(server: Server, **resource: object) -> dict:
    with server.client() as client:
        r = client.post("/match", json={**PILOT, **resource})
    assert r.status_code == 200, r.text
    return r.json()


def token(role: str, sub: str = "root", **claims: object) -> str:
    return create_token(TOKEN_SETTINGS, role=Role(role), sub=sub, ttl_seconds=600, **claims)


# --- submit -----------------------------------------------------------------


def test_the_installed_script_submits_a_json_file(fairmatch, server, clean, tmp_path):
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps([JOB, JOB_GPU]))

    answer = succeeded(fairmatch("submit", str(path), "--url", server.url))

    assert [job["status"] for job in answer["jobs"]] == ["Waiting", "Waiting"]
    created = [get_job(server, job["job_id"]) for job in answer["jobs"]]
    assert [(job["owner"], job["tags"]) for job in created] == [("alice", []), ("bob", ["GPU"])]
    assert [job["task_queue_id"] for job in created] == [job["task_queue_id"] for job in answer["jobs"]]


def test_jobs_submit_queues_a_toml_file_like_submit(run, server, clean, tmp_path):
    path = tmp_path / "jobs.toml"
    path.write_text(
        '[[jobs]]\nowner = "alice"\nowner_group = "g"\nsites = ["S1"]\n'
        "payload = { due = 2026-01-02T03:04:05Z, n = 1 }\n"
        '[[jobs]]\nowner = "bob"\nowner_group = "h"\ncpu_time = 60\n'
    )

    answer = succeeded(run("jobs", "submit", str(path), "--url", server.url))

    first, second = (get_job(server, job["job_id"]) for job in answer["jobs"])
    assert (first["owner"], first["sites"]) == ("alice", ["S1"])
    assert first["payload"] == {"due": "2026-01-02T03:04:05+00:00", "n": 1}  # TOML dates sent as ISO text
    assert (second["owner"], second["owner_group"], second["cpu_time"]) == ("bob", "h", 60)


def test_submit_reads_json_from_stdin(run, server, clean):
    answer = succeeded(run("submit", "-", "--url", server.url, stdin=json.dumps({"jobs": [JOB]})))

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
def test_a_bad_file_is_refused_before_any_request(run, tmp_path, name, content, message):
    path = tmp_path / name
    if content is not None:
        path.write_text(content)

    # an unreachable service would fail with 1: 2 shows the file was refused first
    assert_failed(run("submit", str(path), "--url", unreachable_url()), 2, message)


def test_a_job_the_server_refuses_exits_1_with_the_problem_detail(run, server, clean, tmp_path):
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps([JOB, {**JOB, "cpu_time": -1}]))

    result = run("submit", str(path), "--url", server.url)

    assert_failed(result, 1, "error: Invalid input: body.jobs.1.cpu_time")
    with server.client() as client:
        assert client.get("/jobs").json()["jobs"] == []  # all or nothing


def test_a_submission_in_several_batches_queues_every_job_with_progress_lines(
    run, monkeypatch, server, clean, tmp_path
):
    monkeypatch.setattr(job_commands, "BATCH_SIZE", 2)
    path = tmp_path / "many.json"
    path.write_text(json.dumps({"jobs": [{**JOB, "owner": f"u{i % 4}"} for i in range(5)]}))

    result = run("jobs", "submit", str(path), "--url", server.url)

    answer = succeeded(result)
    assert len({j["job_id"] for j in answer["jobs"]}) == 5
    assert result.stderr.splitlines() == [
        "batch 1/3 (jobs 1-2) queued: 2/5 jobs",
        "batch 2/3 (jobs 3-4) queued: 4/5 jobs",
        "batch 3/3 (jobs 5-5) queued: 5/5 jobs",
    ]
    with server.client() as client:
        assert client.get("/status").json()["totals"]["waiting"] == 5


def test_a_failed_batch_leaves_the_batches_before_it_queued(invoke, monkeypatch, server, clean, tmp_path):
    monkeypatch.setattr(job_commands, "BATCH_SIZE", 2)
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps([JOB, JOB, JOB, {**JOB, "user_priority": 99}, JOB]))

    result = invoke("submit", str(path), "--url", server.url)

    assert result.exit_code == 1
    assert "error: Invalid input: body.jobs.1.user_priority" in result.stderr
    assert "batch 2/3 (jobs 3-4) failed; the 2 jobs before it stay queued" in result.stderr
    with server.client() as client:
        assert len(client.get("/jobs").json()["jobs"]) == 2


def test_a_terminal_gets_a_progress_bar_instead_of_lines(invoke, monkeypatch, server, clean, tmp_path):
    monkeypatch.setattr(job_commands, "BATCH_SIZE", 2)
    monkeypatch.setattr(render, "stderr_is_tty", lambda: True)
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps([JOB] * 5))

    result = invoke("jobs", "submit", str(path), "--url", server.url)

    assert result.exit_code == 0, result.stderr
    assert len(json.loads(result.stdout)["jobs"]) == 5
    assert "queueing jobs" in result.stderr and "5/5" in result.stderr
    assert "batch" not in result.stderr


# --- taskqueues and match ---------------------------------------------------


def test_taskqueues_lists_the_queues_of_submitted_jobs(run, server, clean):
    submitted = submit_via_api(server, JOB, JOB, JOB_GPU)

    answer = succeeded(run("taskqueues", "--url", server.url))

    queues = {tq["task_queue_id"]: tq for tq in answer["task_queues"]}
    assert set(queues) == {job["task_queue_id"] for job in submitted}
    assert sorted((tq["owner"], tq["jobs"]) for tq in queues.values()) == [("alice", 2), ("bob", 1)]


def test_match_shows_the_eligible_queues_and_claims_nothing(run, server, clean):
    plain, gpu, elsewhere = submit_via_api(server, JOB, JOB_GPU, JOB_ELSEWHERE)

    resource = ["--site", "S1", "--cpu-time", "100000", "--tag", "GPU", "--tag", "SSD"]
    answer = succeeded(run("match", *resource, "--url", server.url))

    queues = {tq["task_queue_id"]: tq["probability"] for tq in answer["task_queues"]}
    assert set(queues) == {plain["task_queue_id"], gpu["task_queue_id"]}
    assert sum(queues.values()) == pytest.approx(1)
    for job in (plain, gpu, elsewhere):
        assert get_job(server, job["job_id"])["status"] == "Waiting"


def test_match_honours_the_resource_options(run, server, clean):
    plain, _ = submit_via_api(server, JOB, JOB_GPU)

    untagged = succeeded(run("match", "--site", "S1", "--cpu-time", "100000", "--url", server.url))
    too_short = succeeded(run("match", "--site", "S1", "--cpu-time", "60", "--url", server.url))

    assert [tq["task_queue_id"] for tq in untagged["task_queues"]] == [plain["task_queue_id"]]
    assert untagged["task_queues"][0]["probability"] == pytest.approx(1)
    assert too_short["task_queues"] == []
    # the JSON carries the analysis: every queue is too long for a 60 s slot, the GPU one lacks its tag
    assert too_short["analysis"]["rejected_by"]["cpu_time"] == 2 and too_short["analysis"]["eligible"] == 0
    assert untagged["analysis"]["rejected_by"]["tags"] == 1 and untagged["analysis"]["eligible"] == 1


# --- pilots -------------------------------------------------------------------


def test_pilots_list_and_show_a_pilot_named_by_a_url(run, server, clean):
    [job] = submit_via_api(server, JOB)
    reference = "https://ce.example.org:9619/123.0"
    with server.client() as client:
        body = {"Site": "S1", "CPUTime": 100000, "GridCE": "ce.example.org", "PilotReference": reference}
        assert client.post("/match", json=body).status_code == 200

    listed = succeeded(run("pilots", "list", "--site", "S1", "--url", server.url))
    shown = succeeded(run("pilots", "show", reference, "--url", server.url))
    only = succeeded(run("pilots", "list", "--reference", reference, "--limit", "5", "--url", server.url))

    assert [p["reference"] for p in listed["pilots"]] == [reference] and listed["next_cursor"] is None
    assert (shown["reference"], shown["grid_ce"], shown["matches"]) == (reference, "ce.example.org", 1)
    assert shown["job_ids"] == [job["job_id"]] and shown["current_job_id"] == job["job_id"]
    assert only["pilots"] == listed["pilots"]
    assert_failed(run("pilots", "show", "https://ce.example.org:9619/999.0", "--url", server.url), 1,
                  "not on record")  # fmt: skip


def test_format_chooses_tables_or_json_whatever_stdout_is(run, server, clean):
    submit_via_api(server, JOB)
    args = ["taskqueues", "--url", server.url]

    piped = run(*args)  # stdout is a pipe: JSON unless asked
    assert [tq["owner"] for tq in succeeded(piped)["task_queues"]] == ["alice"]
    assert succeeded(run("--format", "json", *args)) == succeeded(piped)

    table = run("--format", "table", *args, COLUMNS="200")
    assert table.returncode == 0, table.stderr
    assert "Task queues" in table.stdout and "alice" in table.stdout
    assert table.stdout.splitlines()[2].split()[:3] == ["id", "owner", "group"]
    with pytest.raises(json.JSONDecodeError):
        json.loads(table.stdout)
    assert_failed(run("--format", "yaml", *args), 2, "yaml")


def test_a_refused_resource_exits_1_with_the_problem_detail(run, server, clean):
    resource = ["--site", "S1", "--cpu-time", "10", "--required-tag", "GPU"]
    result = run("match", *resource, "--url", server.url)

    assert_failed(result, 1, "error: Bad request: required_tags must be a subset of tags")


# --- tables on a terminal ---------------------------------------------------


def test_a_terminal_gets_tables(invoke, monkeypatch, server, clean):
    monkeypatch.setattr(render, "stdout_is_tty", lambda: True)
    submit_via_api(server, JOB, {**JOB_GPU, "sites": ["S1", "S2", "S3", "S4", "S5"]})

    result = invoke("match", "--site", "S1", "--cpu-time", "100000", "--tag", "GPU", "--url", server.url)

    assert result.exit_code == 0, result.stderr
    assert "Task queues eligible at S1" in result.stdout
    assert "probability" in result.stdout and "50.0%" in result.stdout
    assert "S1, S2, S3 (+2)" in result.stdout
    with pytest.raises(json.JSONDecodeError):
        json.loads(result.stdout)


def test_a_terminal_gets_the_analysis_and_the_most_restrictive_condition(invoke, monkeypatch, server, clean):
    monkeypatch.setattr(render, "stdout_is_tty", lambda: True)
    submit_via_api(server, JOB, JOB_GPU, JOB_ELSEWHERE)

    result = invoke("match", "--site", "S1", "--cpu-time", "60", "--tag", "GPU", "--url", server.url)

    assert result.exit_code == 0, result.stderr
    shown = " ".join(result.stdout.split())  # titles and captions wrap to the table's width
    assert "Why: queues rejected" in shown and "cpu_time 3" in shown
    assert "0 of 3 queues with jobs eligible" in shown
    assert "Nothing is eligible; the most restrictive condition is cpu_time, which rejects 3 of 3 task queues." in shown


def test_match_takes_several_sites_and_a_slot_memory(invoke, monkeypatch, server, clean):
    monkeypatch.setattr(render, "stdout_is_tty", lambda: False)
    plain, elsewhere, big = submit_via_api(server, JOB, JOB_ELSEWHERE, {**JOB, "min_ram_mb": 16000})

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


# --- jobs ---------------------------------------------------------------------


def test_jobs_list_filters_and_continues_with_the_cursor(at, server):
    ids = [j["job_id"] for j in submit_via_api(server, JOB, OTHER, JOB, JOB, OTHER)]
    match(server, OwnerGroup="h")

    first = at("jobs", "list", "--limit", "2")
    rest = at("jobs", "list", "--cursor", first["next_cursor"])
    alices = at("jobs", "list", "--owner", "alice", "--all")
    waiting_h = at("jobs", "list", "--group", "h", "--status", "waiting")

    assert [j["job_id"] for j in first["jobs"]] == ids[:2] and first["next_cursor"]
    assert [j["job_id"] for j in rest["jobs"]] == ids[2:] and rest["next_cursor"] is None
    assert [j["job_id"] for j in alices["jobs"]] == [ids[0], ids[2], ids[3]]
    assert [j["status"] for j in waiting_h["jobs"]] == ["Waiting"]


def test_jobs_list_takes_every_filter_of_the_listing(at, server):
    ids = [j["job_id"] for j in submit_via_api(server, JOB, {**OTHER, "account": "grid"}, JOB, {**JOB, "cpu_time": 7})]
    matched = match(server, OwnerGroup="h")["job_id"]
    queue = get_job(server, ids[3])["task_queue_id"]
    later = get_job(server, ids[3])["submitted_at"]

    def listed(*args: str) -> list[int]:
        return [j["job_id"] for j in at("jobs", "list", "--all", *args)["jobs"]]

    assert matched == ids[1]
    assert listed("--status", "Matched", "--status", "Waiting") == ids
    assert listed("--site", "S1") == [ids[1]]
    assert listed("--account", "grid") == [ids[1]]
    assert listed("--owner-group", "g", "--task-queue", str(queue)) == [ids[3]]
    assert listed("--since", "2000-01-01T00:00:00+00:00", "--until", "2000-01-02T00:00:00+00:00") == []
    assert ids[3] in listed("--since", later)
    first = at("jobs", "list", "--limit", "1", "--status", "Waiting")
    assert [
        j["job_id"] for j in at("jobs", "list", "--after", first["next_cursor"], "--status", "Waiting")["jobs"]
    ] == [ids[2], ids[3]]


def test_a_listing_parameter_the_service_does_not_take_is_refused_over_http(server, clean):
    submit_via_api(server, JOB)
    with server.client() as client:
        everything = client.get("/jobs")
        mistyped = client.get("/jobs", params={"sites": "S1"})
    assert everything.status_code == 200 and len(everything.json()["jobs"]) == 1
    assert mistyped.status_code == 422 and "sites" in mistyped.text


def test_jobs_list_all_walks_every_page(invoke, monkeypatch, server, clean):
    monkeypatch.setattr(job_commands, "PAGE_SIZE", 2)
    ids = [j["job_id"] for j in submit_via_api(server, *[JOB] * 5)]

    every = invoke("jobs", "list", "--all", "--url", server.url)
    limited = invoke("jobs", "list", "--limit", "3", "--url", server.url)

    assert every.exit_code == 0, every.stderr
    assert [j["job_id"] for j in json.loads(every.stdout)["jobs"]] == ids
    assert json.loads(every.stdout)["next_cursor"] is None
    assert [j["job_id"] for j in json.loads(limited.stdout)["jobs"]] == ids[:3]  # two pages, the second of one
    assert json.loads(limited.stdout)["next_cursor"]


def test_jobs_show_priority_status_and_kill(at, run, server):
    waiting, matched = submit_via_api(server, JOB, OTHER)
    match(server, OwnerGroup="h")

    shown = at("jobs", "show", str(waiting["job_id"]))
    raised = at("jobs", "priority", str(waiting["job_id"]), "--user-priority", "7", "--priority-class", "2")
    running = at("jobs", "status", str(matched["job_id"]), "running", "--minor-status", "started")
    killed = at("jobs", "kill", str(waiting["job_id"]))
    again = run("jobs", "kill", str(waiting["job_id"]), "--url", server.url)

    assert (shown["owner"], shown["status"]) == ("alice", "Waiting")
    assert (raised["user_priority"], raised["priority_class"]) == (7, 2)
    assert (running["status"], running["minor_status"]) == ("Running", "started")
    assert killed["status"] == "Killed" and get_job(server, waiting["job_id"])["status"] == "Killed"
    assert_failed(again, 1, "error: Conflict")


def test_jobs_reschedule_puts_a_matched_job_back_uncounted(at, run, server, clean):
    # a group of its own: queues other tests left in the shared server's catalog stay out of the match
    (job,) = submit_via_api(server, {**JOB, "owner_group": "rescheduling"})
    match(server, OwnerGroup="rescheduling")
    back = at("jobs", "reschedule", str(job["job_id"]))
    assert (back["status"], back["reschedules"], back["minor_status"]) == ("Waiting", 0, "rescheduled by its owner")
    assert_failed(run("jobs", "reschedule", str(job["job_id"]), "--url", server.url), 1, "error: Conflict")


def test_an_unknown_job_exits_1(run, server, clean):
    assert_failed(run("jobs", "show", "999999", "--url", server.url), 1, "error: Not found")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["jobs", "priority", "1"], "give --user-priority, --priority-class or both"),
        (["jobs", "priority", "1", "--user-priority", "11"], "--user-priority"),
        (["jobs", "show", "x"], "Invalid value for 'ID'"),
        (["jobs", "status", "1", "Matched"], "Invalid value for 'STATUS'"),
        # the states as the API and the docs spell them, not case-folded
        (["jobs", "status", "2", "Finished"], "'Finished' is not one of Running, Done, Failed, Stalled, Waiting"),
        (["jobs", "list", "--status", "Sleeping"], "Invalid value for '--status'"),
        (
            ["jobs", "list", "--status", "sleeping"],
            "is not one of Waiting, Held, Matched, Running, Stalled, Done, Failed",
        ),
        (["groups", "set", "g", "--priority", "5000"], "--priority"),
        (["status", "--token", "two words"], "not a token"),
        (["no-such-command"], "No such command"),
    ],
)
def test_bad_input_exits_2_in_one_line_before_any_request(run, args, message):
    # an unreachable service would fail with 1: 2 shows the input was refused first
    result = run(*args, "--url", unreachable_url()) if args[0] != "no-such-command" else run(*args)

    assert_failed(result, 2, message)
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "args", [["jobs", "list"], ["groups", "list"], ["limits", "show"], ["status"], ["recompute"], ["taskqueues"]]
)
@pytest.mark.parametrize("how", ["option", "environment"])
def test_an_unreachable_service_exits_1_naming_the_url(run, args, how):
    url = unreachable_url()

    result = run(*args, "--url", url) if how == "option" else run(*args, FAIRMATCH_URL=url)

    assert_failed(result, 1, f"cannot connect to fairmatch at {url}")


# --- groups -----------------------------------------------------------------


def test_groups_set_creates_from_the_defaults_and_changes_only_what_is_given(at, run, server):
    created = at("groups", "set", "atlas", "--share", "250", "--properties", "JOB_SHARING, NormalUser")
    changed = at("groups", "set", "atlas", "--priority", "3", "--allow-background-tqs", "--description", "ATLAS")
    cleared = at("groups", "set", "atlas", "--properties", "", "--no-allow-background-tqs")
    shown = at("groups", "show", "atlas")
    listed = at("groups", "list")

    assert created == {
        "name": "atlas",
        "job_share": 250.0,
        "properties": ["JOB_SHARING", "NormalUser"],
        "job_sharing": True,
        "allow_background_tqs": False,
        "priority": 0,
        "description": None,
        "configured": True,
    }
    assert (changed["job_share"], changed["properties"], changed["priority"]) == (250.0, created["properties"], 3)
    assert (changed["allow_background_tqs"], changed["description"]) == (True, "ATLAS")
    assert (cleared["properties"], cleared["job_sharing"], cleared["allow_background_tqs"]) == ([], False, False)
    assert (cleared["priority"], cleared["description"]) == (3, "ATLAS")
    assert shown == cleared and [g["name"] for g in listed["groups"]] == ["atlas"]  # fmt: skip
    assert_failed(run("groups", "show", "cms", "--url", server.url), 1, "error: Not found")


def test_groups_delete_leaves_the_group_s_jobs_at_the_defaults(at, run, server):
    at("groups", "set", "g", "--share", "5")
    submit_via_api(server, JOB)

    deleted = at("groups", "delete", "g")

    assert deleted == {"deleted": "g"}
    assert [(g["name"], g["job_share"], g["configured"]) for g in at("groups", "list")["groups"]] == [
        ("g", 1000.0, False)
    ]
    assert_failed(run("groups", "delete", "g", "--url", server.url), 1, "error: Not found")


def test_group_names_are_sent_as_one_path_segment(at):
    at("groups", "set", "lhcb user?x#y", "--share", "1")

    assert at("groups", "show", "lhcb user?x#y")["name"] == "lhcb user?x#y"


# --- recompute and status ---------------------------------------------------


def test_recompute_answers_with_its_summary(at, server):
    submit_via_api(server, JOB, OTHER)

    run = at("recompute")

    assert run["task_queues"] == 2 and "changed" in run and run["policy"] == "dirac"
    assert at("status")["last_priority_run"]["finished_at"] == run["finished_at"]


def test_status_numbers_follow_submissions_and_matches(at, server):
    before = at("status")
    submit_via_api(server, JOB, JOB, JOB, OTHER)
    queued = at("status")
    match(server, OwnerGroup="g")
    match(server, OwnerGroup="g")
    running_job = match(server, OwnerGroup="h")
    with server.client() as client:
        assert client.post(f"/jobs/{running_job['job_id']}/status", json={"status": "Running"}).status_code == 200
    after = at("status", "--top", "1")

    assert before["totals"] == {"waiting": 0, "held": 0, "matched": 0, "running": 0, "stalled": 0}
    assert [w["matches"] for w in before["match_rate"]] == [0, 0]
    assert queued["groups"] == [
        {"owner_group": "g", "waiting": 3, "held": 0, "matched": 0, "running": 0, "stalled": 0},
        {"owner_group": "h", "waiting": 1, "held": 0, "matched": 0, "running": 0, "stalled": 0},
    ]
    assert [(tq["owner"], tq["jobs"]) for tq in queued["top_task_queues"]] == [("alice", 3), ("bob", 1)]
    assert after["totals"] == {"waiting": 1, "held": 0, "matched": 2, "running": 1, "stalled": 0}
    assert [(w["window_seconds"], w["matches"]) for w in after["match_rate"]] == [(60, 3), (300, 3)]
    assert after["match_rate"][0]["per_second"] == pytest.approx(3 / 60)
    assert [(tq["owner"], tq["jobs"]) for tq in after["top_task_queues"]] == [("alice", 1)]


def test_a_terminal_gets_the_status_screen(invoke, monkeypatch, server, clean):
    monkeypatch.setattr(render, "stdout_is_tty", lambda: True)
    submit_via_api(server, JOB, OTHER)
    match(server, OwnerGroup="h")

    result = invoke("status", "--url", server.url)

    assert result.exit_code == 0, result.stderr
    for title in ("Jobs per group", "Matches", "Busiest task queues", "Last priority run"):
        assert title in result.stdout
    assert "total" in result.stdout and "1 min" in result.stdout and "alice" in result.stdout


def test_the_status_screen_leads_with_the_database_warnings_when_there_are_any(at, server):
    from rich.console import Console

    from fairmatch.cli.status import status_screen

    document = at("status")
    assert isinstance(document["database_warnings"], list)  # PostgreSQL: as this server runs; SQLite: none
    warned = {**document, "database_warnings": [{"setting": "fsync", "value": "off", "cost": "jobs may be lost"}]}
    for shown, expect in ((warned, True), ({**document, "database_warnings": []}, False)):
        console = Console(width=200, record=True)
        console.print(status_screen(shown))
        text = console.export_text()
        assert ("Database settings that break" in text) is expect
        assert ("jobs may be lost" in text) is expect
        assert "Jobs per group" in text


def test_sshare_before_any_run_shows_the_empty_entity_table(invoke, monkeypatch, server, clean):
    monkeypatch.setattr(render, "stdout_is_tty", lambda: True)

    result = invoke("sshare", "--url", server.url)

    assert result.exit_code == 0, result.stderr
    assert "Entities" in result.stdout and "NormShare" in result.stdout
    assert "No entities: no job was waiting" in result.stdout
    assert "Priorities" not in result.stdout


# --- token mode -------------------------------------------------------------


def test_token_mode_without_a_token_is_a_clean_401(run, token_server, clean):
    result = run("jobs", "list", "--url", token_server.url)

    assert_failed(result, 1, "error: Unauthorized", "give --token or set FAIRMATCH_TOKEN")
    assert len(result.stderr.strip().splitlines()) == 1


def test_token_mode_takes_the_token_from_the_option_or_the_environment(run, token_server, clean, tmp_path):
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps([JOB]))
    url = ["--url", token_server.url]

    submitted = succeeded(run("jobs", "submit", str(path), *url, "--token", token("admin")))
    listed = succeeded(run("jobs", "list", *url, FAIRMATCH_TOKEN=token("operator")))
    pasted = succeeded(run("status", *url, "--token", f"Bearer {token('operator')}"))
    group = succeeded(run("groups", "set", "g", "--share", "5", *url, FAIRMATCH_TOKEN=token("admin")))

    assert [j["job_id"] for j in listed["jobs"]] == [j["job_id"] for j in submitted["jobs"]]
    assert pasted["totals"]["waiting"] == 1
    assert group["job_share"] == 5.0


def test_token_mode_refuses_roles_and_bad_tokens_in_one_line(run, token_server, clean):
    url = ["--url", token_server.url]

    assert_failed(run("status", *url, "--token", token("user", groups=["g"])), 1, "error: Forbidden")
    assert_failed(run("recompute", *url, "--token", token("operator")), 1, "error: Forbidden")
    assert_failed(run("groups", "list", *url, "--token", "not.a.jwt"), 1, "error: Unauthorized")


# --- site limits ------------------------------------------------------------


def test_limits_set_show_set_one_and_remove(at, run, server, tmp_path):
    path = tmp_path / "limits.toml"
    path.write_text(
        '[[limits]]\nsite = "S1"\nattribute = "owner_group"\nvalue = "g"\nrunning_limit = 2\n'
        '[[limits]]\nsite = "S2"\nattribute = "JobType"\nvalue = "MC"\nmatching_delay = 1.5\n'
    )
    url = ["--url", server.url]

    replaced = at("limits", "set", str(path))
    shown = at("limits", "show")
    added = at("limits", "set-one", "S1", "owner", "alice", "--matching-delay", "30")
    changed = at("limits", "set-one", "S1", "owner_group", "g", "--running-limit", "5", "--matching-delay", "2")
    dropped = at("limits", "set-one", "S1", "owner_group", "g", "--matching-delay", "none")
    removed = at("limits", "remove", "S2", "JobType", "MC")
    missing = run("limits", "remove", "S2", "job_type", "MC", *url)
    nothing = run("limits", "set-one", "S1", "owner", "alice", "--matching-delay", "none", *url)

    def keyed(answer: dict) -> dict:
        return {(e["site"], e["attribute"], e["value"]): (e["running_limit"], e["matching_delay"])
                for e in answer["limits"]}  # fmt: skip

    assert (
        keyed(replaced)
        == keyed(shown)
        == {
            ("S1", "owner_group", "g"): (2, None),
            ("S2", "job_type", "MC"): (None, 1.5),  # DIRAC's JobType stored as job_type
        }
    )
    assert all(e["running"] == 0 and e["last_match_at"] is None for e in shown["limits"])
    assert keyed(added)[("S1", "owner", "alice")] == (None, 30.0) and len(added["limits"]) == 3
    assert keyed(changed)[("S1", "owner_group", "g")] == (5, 2.0)
    assert keyed(dropped)[("S1", "owner_group", "g")] == (5, None)
    assert keyed(removed) == {("S1", "owner_group", "g"): (5, None), ("S1", "owner", "alice"): (None, 30.0)}
    assert_failed(missing, 1, "there is no limit for job_type 'MC' at S2")
    assert_failed(nothing, 2, "would limit nothing")
    assert keyed(at("limits", "show")) == keyed(removed)


def test_limits_show_output_can_be_set_back_and_an_empty_list_clears(at, run, server):
    at("limits", "set-one", "S1", "owner", "alice", "--running-limit", "1")
    match_before = at("limits", "show")

    again = at("limits", "set", "-", stdin=json.dumps(match_before))  # running, last_match_at left out
    cleared = at("limits", "set", "-", stdin='{"limits": []}')

    assert again["limits"] == match_before["limits"]
    assert cleared == {"limits": []}


@pytest.mark.parametrize(
    ("content", "code", "message"),
    [
        ('{"limits": [{"site": "S1", "attribute": "colour", "value": "x", "running_limit": 1}]}', 1, "Invalid input"),
        ('{"limits": [{"site": "S1", "attribute": "owner", "value": "x"}]}', 1, "Invalid input"),
        ('{"limit": []}', 2, "expected only a 'limits' list"),
        ("[1]", 2, "limit 1 is a int"),
        ("{", 2, "not valid JSON"),
    ],
)
def test_a_bad_limits_file_is_refused_and_changes_nothing(at, run, server, content, code, message):
    at("limits", "set-one", "S1", "owner", "alice", "--running-limit", "1")

    assert_failed(run("limits", "set", "-", "--url", server.url, stdin=content), code, message)
    assert len(at("limits", "show")["limits"]) == 1


def test_limits_need_an_admin_to_change_and_an_operator_to_read(run, token_server, clean):
    url = ["--url", token_server.url]

    assert succeeded(run("limits", "show", *url, "--token", token("operator"))) == {"limits": []}
    assert_failed(run("limits", "set-one", "S1", "owner", "a", "--running-limit", "1", *url,
                      "--token", token("operator")), 1, "error: Forbidden")  # fmt: skip
    assert_failed(run("limits", "show", *url), 1, "error: Unauthorized")


def test_a_terminal_gets_the_limits_table(invoke, monkeypatch, server, clean):
    monkeypatch.setattr(render, "stdout_is_tty", lambda: True)

    result = invoke("limits", "set-one", "S1", "owner_group", "g", "--matching-delay", "2.5", "--url", server.url)

    assert result.exit_code == 0, result.stderr
    assert "Site limits" in result.stdout and "2.5 s" in result.stdout and "1 limits" in result.stdout


def test_the_audit_log_and_a_job_s_history_from_the_command_line(run, token_server, clean, tmp_path):
    url = ["--url", token_server.url]
    succeeded(run("groups", "set", "g", "--share", "5", *url, FAIRMATCH_TOKEN=token("admin")))
    log = succeeded(run("audit", "--action", "group.put", *url, FAIRMATCH_TOKEN=token("admin")))
    assert [(e["action"], e["target"]) for e in log["entries"]] == [("group.put", "g")]
    assert_failed(run("audit", *url, FAIRMATCH_TOKEN=token("operator")), 1, "error: Forbidden")

    path = tmp_path / "jobs.json"
    path.write_text(json.dumps([JOB]))
    (job,) = succeeded(run("jobs", "submit", str(path), *url, FAIRMATCH_TOKEN=token("admin", "ops-anna")))["jobs"]
    succeeded(run("jobs", "kill", str(job["job_id"]), *url, FAIRMATCH_TOKEN=token("operator", "ops-olga")))
    history = succeeded(run("jobs", "history", str(job["job_id"]), *url, FAIRMATCH_TOKEN=token("operator")))
    assert [(e["status"], e["source"], e["by"]) for e in history["events"]] == [
        ("Waiting", "submit", "ops-anna"), ("Killed", "kill", "ops-olga")
    ]  # fmt: skip


def test_a_bulk_action_on_a_terminal_asks_first(monkeypatch, server, clean, tmp_path):
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setattr(render, "stdout_is_tty", lambda: False)
    monkeypatch.setattr(render, "stdin_is_tty", lambda: True)
    runner = CliRunner()
    with server.client() as client:
        ids = [j["job_id"] for j in client.post("/jobs", json={"jobs": [JOB] * 3}).json()["jobs"]]

    refused = runner.invoke(cli, ["jobs", "hold", "--owner", JOB["owner"], "--url", server.url], input="n\n")
    assert refused.exit_code == 1 and "hold 3 jobs of owner alice? [y/N]" in refused.stderr
    assert "nothing changed" in refused.stderr and "error" not in refused.stderr and refused.stdout == ""
    held = runner.invoke(cli, ["jobs", "hold", "--owner", JOB["owner"], "--url", server.url], input="y\n")
    assert held.exit_code == 0, held.stderr
    assert json.loads(held.stdout) == {"matched": 3, "changed": 3, "job_ids": ids}
    released = runner.invoke(cli, ["jobs", "release", *map(str, ids[:2]), "--yes", "--url", server.url])
    assert "?" not in released.stderr and json.loads(released.stdout)["job_ids"] == ids[:2]
    dry = runner.invoke(cli, ["jobs", "kill", "--status", "Held", "--dry-run", "--url", server.url])
    assert json.loads(dry.stdout) == {"matched": 1, "changed": 1, "job_ids": ids[2:]}
    nothing = runner.invoke(cli, ["jobs", "kill", "--url", server.url])
    assert nothing.exit_code == 2 and "name the jobs" in nothing.stderr


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
    plain, gpu = submit_via_api(server, JOB, {**JOB, "number_of_gpus": 2})
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
