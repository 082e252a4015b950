"""The admin commands of `fairmatch` (jobs, groups, limits, recompute, status) against real servers.

Commands run through the console script's `main()` in this process
(tests/in_process.py: their own environment, directory, stdin and piped
output, so they print the server's JSON; test_cli.py runs the installed script
itself); tables, progress bars and paging are checked with CliRunner, where
`stdout_is_tty`, `stderr_is_tty` and the sizes can be replaced. Token-mode
commands run against `token_server`.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable

import pytest
from typer.testing import CliRunner

from fairmatch.auth.tokens import Role, create_token
from fairmatch.cli import cli, render
from fairmatch.cli import jobs as job_commands
from tests.conftest import TOKEN_SETTINGS, Server
from tests.e2e.test_cli import assert_failed, get_job, submit_via_api, succeeded, unreachable_url
from tests.in_process import run_fairmatch

JOB = {"owner": "alice", "owner_group": "g", "sites": ["S1"], "cpu_time": 3600}
OTHER = {"owner": "bob", "owner_group": "h", "sites": ["S1"], "cpu_time": 3600}
PILOT = {"Site": "S1", "CPUTime": 100_000}


@pytest.fixture
def run(cli_env, tmp_path) -> Callable[..., subprocess.CompletedProcess]:
    def run(*args: str, stdin: str | None = None, **env: str) -> subprocess.CompletedProcess:
        return run_fairmatch(*args, env={**cli_env, **env}, cwd=tmp_path, stdin=stdin)

    return run


@pytest.fixture
def at(server, clean, run) -> Callable[..., dict]:
    """Run a command against the default server; its JSON answer."""
    return lambda *args, **kw: succeeded(run(*args, "--url", server.url, **kw))


@pytest.fixture
def invoke(monkeypatch) -> Callable[..., object]:
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setattr(render, "stdout_is_tty", lambda: False)
    runner = CliRunner()
    return lambda *args: runner.invoke(cli, list(args), catch_exceptions=False)


def match(server: Server, **resource: object) -> dict:
    with server.client() as client:
        r = client.post("/match", json={**PILOT, **resource})
    assert r.status_code == 200, r.text
    return r.json()


def token(role: str, sub: str = "root", **claims: object) -> str:
    return create_token(TOKEN_SETTINGS, role=Role(role), sub=sub, ttl_seconds=600, **claims)


# --- jobs -------------------------------------------------------------------


def test_jobs_submit_queues_a_file_like_submit(at, server, tmp_path):
    path = tmp_path / "jobs.toml"
    path.write_text('[[jobs]]\nowner = "alice"\nowner_group = "g"\n[[jobs]]\nowner = "bob"\nowner_group = "h"\n')

    answer = at("jobs", "submit", str(path))

    assert [get_job(server, j["job_id"])["owner"] for j in answer["jobs"]] == ["alice", "bob"]


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


@pytest.mark.parametrize("args", [["jobs", "list"], ["groups", "list"], ["limits", "show"], ["status"], ["recompute"]])
def test_an_unreachable_service_exits_1(run, args):
    url = unreachable_url()

    assert_failed(run(*args, "--url", url), 1, f"cannot connect to fairmatch at {url}")


# --- multi-batch submission -------------------------------------------------


def test_more_than_one_batch_from_a_file_queues_every_job_with_progress_lines(run, server, clean, tmp_path):
    total = job_commands.BATCH_SIZE + 3
    path = tmp_path / "many.json"
    path.write_text(json.dumps({"jobs": [{**JOB, "owner": f"u{i % 4}"} for i in range(total)]}))

    result = run("jobs", "submit", str(path), "--url", server.url)

    answer = succeeded(result)
    assert len({j["job_id"] for j in answer["jobs"]}) == total
    lines = result.stderr.splitlines()
    assert lines == [
        f"batch 1/2 (jobs 1-{job_commands.BATCH_SIZE}) queued: {job_commands.BATCH_SIZE}/{total} jobs",
        f"batch 2/2 (jobs {job_commands.BATCH_SIZE + 1}-{total}) queued: {total}/{total} jobs",
    ]
    with server.client() as client:
        assert client.get("/status").json()["totals"]["waiting"] == total


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
