"""The site mask over real HTTP (DIRAC's banned sites): operators ban a broken site, its
pilots then get only the jobs meant to test it, and every replica applies a change
within the catalog's refresh bound. The API, the roles, the CLI and bad input too."""

from __future__ import annotations

import time
from collections.abc import Callable
from urllib.parse import quote

import httpx
import pytest

from tests.e2e.test_cli import assert_failed, succeeded
from tests.in_process import run_fairmatch
from tests.problems import assert_problem

BROKEN, FINE = "LCG.Broken.org", "LCG.Fine.org"
REFRESH_BOUND = 1.0  # seconds: matching.refresh_seconds (0.25) plus a read, with room (as the catalog's test)


def submit(client: httpx.Client, count: int = 1, **spec) -> list[int]:
    jobs = [{"owner": "alice", "owner_group": "lhcb_user", "cpu_time": 3600, **spec} for _ in range(count)]
    r = client.post("/jobs", json={"jobs": jobs})
    assert r.status_code == 201, r.text
    return [j["job_id"] for j in r.json()["jobs"]]


def pilot(site: str, **extra) -> dict:
    # JobType any: the job types a pilot offers are not what is tested here
    return {"Site": site, "CPUTime": 100_000, "JobType": "any", **extra}


def match(client: httpx.Client, site: str, **extra) -> httpx.Response:
    r = client.post("/match", json=pilot(site, **extra))
    assert r.status_code in (200, 204), r.text
    return r


def ban(client: httpx.Client, site: str, reason: str = "SAM tests fail") -> httpx.Response:
    return client.put(f"/site-mask/{quote(site, safe='')}", json={"reason": reason})


def allow(client: httpx.Client, site: str) -> httpx.Response:
    return client.delete(f"/site-mask/{quote(site, safe='')}")


def banned(client: httpx.Client) -> list[str]:
    r = client.get("/site-mask")
    assert r.status_code == 200, r.text
    return [entry["site"] for entry in r.json()["sites"]]


# --- the API -----------------------------------------------------------------------------


def test_ban_list_rephrase_and_allow(client):
    assert client.get("/site-mask").json() == {"sites": []}
    first = ban(client, BROKEN, "CE down")
    assert first.status_code == 201, first.text
    answer = first.json()
    assert answer.keys() == {"site", "reason", "banned_at", "banned_by", "reported", "similar", "warning"}
    assert (answer["site"], answer["reason"], answer["banned_by"]) == (BROKEN, "CE down", "anonymous")
    assert (answer["reported"], answer["similar"]) == (False, [])  # no pilot on record: banned all the same
    entry = {k: v for k, v in answer.items() if k in ("site", "reason", "banned_at", "banned_by")}
    assert ban(client, "LCG.Another.org").status_code == 201
    assert client.get("/site-mask").json()["sites"][1] == entry  # by name: Another, Broken

    again = ban(client, BROKEN, "storage lost")
    assert again.status_code == 200, again.text
    assert again.json() == {**answer, "reason": "storage lost"}  # still banned since the first ban

    assert allow(client, BROKEN).status_code == 204
    assert banned(client) == ["LCG.Another.org"]
    gone = allow(client, BROKEN)
    assert "not in the site mask" in assert_problem(gone, 404)["detail"]


def test_any_site_name_is_addressable(client):
    odd = "Site/with ?#% and ü"
    assert ban(client, odd).status_code == 201
    assert banned(client) == [odd]
    assert allow(client, odd).status_code == 204
    assert banned(client) == []


BAD_INPUT_IDS = ["long-site", "empty-site", "any", "control-site", "no-reason", "empty-reason", "blank-reason",
                 "newline-reason", "long-reason", "number-reason", "extra-key"]  # fmt: skip


@pytest.mark.parametrize(
    ("path", "body", "loc", "fragment"),
    [
        ("/site-mask/" + "x" * 256, {"reason": "r"}, ["path", "site"], "at most 255"),
        ("/site-mask/", {"reason": "r"}, ["path", "site"], "at least 1"),
        ("/site-mask/ANY", {"reason": "r"}, ["path", "site"], "every site"),
        ("/site-mask/S%01", {"reason": "r"}, ["path", "site"], "control characters"),
        ("/site-mask/S1", {}, ["body", "reason"], "Field required"),
        ("/site-mask/S1", {"reason": ""}, ["body", "reason"], "blank"),
        ("/site-mask/S1", {"reason": " "}, ["body", "reason"], "blank"),
        ("/site-mask/S1", {"reason": "a\nb"}, ["body", "reason"], "control characters"),
        ("/site-mask/S1", {"reason": "r" * 1001}, ["body", "reason"], "at most 1000"),
        ("/site-mask/S1", {"reason": 5}, ["body", "reason"], "valid string"),
        ("/site-mask/S1", {"reason": "r", "until": "never"}, ["body", "until"], "Extra inputs"),
    ],
    ids=BAD_INPUT_IDS,
)
def test_bad_input_is_a_422_naming_the_key_and_bans_nothing(client, path, body, loc, fragment):
    problem = assert_problem(client.put(path, json=body), 422)
    assert [e["loc"] for e in problem["errors"]] == [loc]
    assert fragment in problem["errors"][0]["msg"]
    assert banned(client) == []


def test_empty_and_too_long_names_are_422_when_allowing_too(client):
    for path in ("/site-mask/", "/site-mask/" + "x" * 256):
        problem = assert_problem(client.delete(path), 422)
        assert [e["loc"] for e in problem["errors"]] == [["path", "site"]]


def test_admins_and_operators_write_every_role_reads(as_role):
    operator = as_role("operator", sub="ops.alice")
    user, pilot_client = as_role("user", sub="bob", groups=["lhcb_user"]), as_role("pilot", sub="p1", site=BROKEN)
    entry = ban(operator, BROKEN, "no CVMFS").json()
    assert entry["banned_by"] == "ops.alice"
    assert ban(as_role("admin", sub="root"), BROKEN, "no CVMFS, ticket 42").json()["banned_by"] == "root"
    for reader in (user, pilot_client):  # a pilot may learn why its site gets only test jobs
        assert reader.get("/site-mask").json()["sites"][0]["reason"] == "no CVMFS, ticket 42"
    for writer in (user, pilot_client):
        assert_problem(ban(writer, FINE), 403)
        assert_problem(allow(writer, BROKEN), 403)
    assert [s["site"] for s in operator.get("/site-mask").json()["sites"]] == [BROKEN]
    assert allow(operator, BROKEN).status_code == 204


# --- matching at a banned site ---------------------------------------------------------------


def test_a_banned_site_gets_test_jobs_only_and_allowing_it_restores_matching(client):
    test_job = submit(client, job_types=["Test"])[0]
    mc_job = submit(client, job_types=["MCSimulation"])[0]
    untyped = submit(client)[0]
    assert ban(client, BROKEN).status_code == 201

    assert match(client, BROKEN).json()["job_id"] == test_job
    assert match(client, BROKEN).status_code == 204  # MCSimulation and the untyped job wait
    assert match(client, BROKEN, JobType="MCSimulation").status_code == 204
    assert match(client, FINE).json()["job_id"] in {mc_job, untyped}  # another site is unaffected

    assert allow(client, BROKEN).status_code == 204
    assert match(client, BROKEN).json()["job_id"] in {mc_job, untyped}
    assert match(client, BROKEN).status_code == 204  # all three matched


def test_a_job_listing_a_test_type_among_others_passes(client):
    both = submit(client, job_types=["MCSimulation", "Test"])[0]
    ban(client, BROKEN)
    assert match(client, BROKEN, JobType="MCSimulation").json()["job_id"] == both


def test_the_dry_run_counts_the_queues_the_mask_rejects(client):
    submit(client, job_types=["Test"])
    submit(client, 2, job_types=["MCSimulation"])
    submit(client)
    ban(client, BROKEN)
    at_broken = client.post("/taskqueues/matching", json=pilot(BROKEN)).json()
    assert at_broken["analysis"]["rejected_by"]["site_mask"] == 2
    assert at_broken["analysis"]["eligible"] == 1
    assert [tq["job_types"] for tq in at_broken["task_queues"]] == [["Test"]]
    at_fine = client.post("/taskqueues/matching", json=pilot(FINE)).json()
    assert at_fine["analysis"]["rejected_by"]["site_mask"] == 0 and at_fine["analysis"]["eligible"] == 3
    anywhere = client.post("/taskqueues/matching", json=pilot("any")).json()
    assert anywhere["analysis"]["rejected_by"]["site_mask"] == 0


def test_a_pilot_token_pinned_to_a_banned_site_gets_the_test_job(as_role):
    admin = as_role("admin")
    test_job = submit(admin, job_types=["Test"])[0]
    submit(admin, job_types=["User"])
    ban(admin, BROKEN)
    pinned = as_role("pilot", sub="pilot.broken", site=BROKEN)
    assert match(pinned, BROKEN).json()["job_id"] == test_job
    assert match(pinned, BROKEN).status_code == 204


def test_a_pilot_naming_no_job_type_gets_the_test_job_in_either_mode(quiet_server):
    """The mask's job types stand in for the pilot's, as DIRAC's Matcher puts JobType = Test in
    place of the pilot's: in strict mode too, a pilot leaving JobType out gets the Test job."""
    dirac = quiet_server(MATCHING__UNSTATED_FIELDS="dirac")
    with dirac.client() as client:
        submit(client)
        test_job = submit(client, job_types=["Test"])[0]
        ban(client, BROKEN)
        leaving_it_out = {"Site": BROKEN, "CPUTime": 100_000}
        strict = quiet_server()
        with strict.client() as other:
            found = other.post("/taskqueues/matching", json=leaving_it_out).json()["analysis"]  # reads the mask
            assert (found["eligible"], found["rejected_by"]["job_type"], found["rejected_by"]["site_mask"]) == (1, 0, 1)
            assert other.post("/match", json=leaving_it_out).json()["job_id"] == test_job
        assert client.post("/match", json=leaving_it_out).status_code == 204  # the untyped job waits


def test_the_test_types_are_a_setting(quiet_server):
    server = quiet_server(MATCHING__MASKED_SITE_JOB_TYPES='["SAM", "Probe"]')
    with server.client() as client:
        submit(client, job_types=["Test"])
        probe = submit(client, job_types=["Probe"])[0]
        ban(client, BROKEN)
        assert match(client, BROKEN).json()["job_id"] == probe
        assert match(client, BROKEN).status_code == 204  # Test is not among the configured types


# --- another replica --------------------------------------------------------------------------


def test_another_replica_applies_a_ban_and_an_allow_within_the_refresh_bound(client, server_factory):
    other = server_factory(MATCHING__REFRESH_SECONDS="0.25").client()
    submit(client, 100, job_types=["MCSimulation"])
    assert match(other, BROKEN).status_code == 200  # its catalog holds the queue

    assert ban(client, BROKEN).status_code == 201
    banned_at = time.monotonic()
    while match(other, BROKEN).status_code == 200:  # each match until then takes a job
        assert time.monotonic() - banned_at < REFRESH_BOUND, "the ban is not applied within the bound"
        time.sleep(0.02)
    assert all(match(other, BROKEN).status_code == 204 for _ in range(3))  # and it stays applied

    assert allow(client, BROKEN).status_code == 204
    allowed_at = time.monotonic()
    while match(other, BROKEN).status_code == 204:
        assert time.monotonic() - allowed_at < REFRESH_BOUND, "the allow is not applied within the bound"
        time.sleep(0.02)


# --- the command line ------------------------------------------------------------------------


@pytest.fixture
def run(cli_env, tmp_path) -> Callable[..., object]:
    return lambda *args, **env: run_fairmatch(*args, env={**cli_env, **env}, cwd=tmp_path)


def test_sites_ban_list_and_allow(run, server, client):
    url = ["--url", server.url]
    for site in (BROKEN, FINE):  # pilots reported both sites: no question
        submit(client, sites=[site])
        r = client.post("/match", json=pilot(site, PilotReference=f"https://ce.{site}/1"))
        assert r.status_code == 200, r.text
    entry = succeeded(run("sites", "ban", BROKEN, "--reason", "CE down", *url))
    assert (entry["site"], entry["reason"], entry["banned_by"]) == (BROKEN, "CE down", "anonymous")
    assert (entry["reported"], entry["similar"], entry["warning"]) == (True, [], None)
    rephrased = succeeded(run("sites", "ban", BROKEN, "--reason", "CE still down", *url))
    assert rephrased == {**entry, "reason": "CE still down"}
    succeeded(run("sites", "ban", FINE, "--reason", "downtime", *url))
    listed = succeeded(run("sites", "list", *url))
    assert [s["site"] for s in listed["sites"]] == [BROKEN, FINE]
    assert listed == client.get("/site-mask").json()

    left = succeeded(run("sites", "allow", FINE, *url))
    assert left == {"sites": [{k: v for k, v in rephrased.items() if k not in ("reported", "similar", "warning")}]}
    assert_failed(run("sites", "allow", FINE, *url), 1, f"site {FINE!r} is not banned")


@pytest.mark.parametrize(
    ("args", "message"),
    [(["sites", "ban", BROKEN], "--reason"), (["sites", "ban", BROKEN, "--reason", " "], "--reason must say why")],
)
def test_sites_ban_needs_a_reason(run, args, message):
    # exit 2 before any request: the URL is never reached
    assert_failed(run(*args, "--url", "http://127.0.0.1:9"), 2, message)


def test_sites_commands_with_tokens_follow_the_roles(run, token_server, clean):
    from tests.e2e.test_cli import token

    url = ["--url", token_server.url]
    operator = token("operator", "ops")
    entry = succeeded(run("sites", "ban", BROKEN, "--reason", "r", "--yes", *url, FAIRMATCH_TOKEN=operator))
    assert entry["banned_by"] == "ops"
    [listed] = succeeded(run("sites", "list", *url, FAIRMATCH_TOKEN=token("pilot", "p")))["sites"]
    assert listed.items() <= entry.items()
    user = token("user", "bob", groups=["g"])
    # the check the ban makes first is the operators' too
    assert_failed(run("sites", "ban", FINE, "--reason", "r", *url, FAIRMATCH_TOKEN=user), 1, "role user may not")
    assert_failed(run("sites", "ban", FINE, "--reason", "r", "-y", *url, FAIRMATCH_TOKEN=user), 1, "role user may not")
    assert_failed(run("sites", "allow", BROKEN, *url, FAIRMATCH_TOKEN=user), 1, "role user may not")
    assert succeeded(run("sites", "allow", BROKEN, *url, FAIRMATCH_TOKEN=token("admin")))["sites"] == []


def test_a_terminal_gets_the_mask_as_a_table(monkeypatch, server, clean):
    from typer.testing import CliRunner

    from fairmatch.cli import cli, render

    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setattr(render, "stdout_is_tty", lambda: True)
    runner = CliRunner()
    url = ["--url", server.url]
    banned_now = runner.invoke(cli, ["sites", "ban", BROKEN, "--reason", "CE down", "--yes", *url],
                               catch_exceptions=False)  # fmt: skip
    listed = runner.invoke(cli, ["sites", "list", *url], catch_exceptions=False)
    assert banned_now.exit_code == listed.exit_code == 0, (banned_now.stderr, listed.stderr)
    assert "Site banned" in banned_now.stdout and "Site mask" in listed.stdout
    for text in (BROKEN, "CE down", "anonymous", "1 banned"):
        assert text in listed.stdout
