"""Site limits over real HTTP (DIRAC's Limiter): RunningLimit and MatchingDelay
per site × attribute × value, kept in the database so that every replica enforces them."""

from __future__ import annotations

import json
import subprocess
import threading
import time

import httpx
import pytest

from tests.in_process import run_fairmatch
from tests.problems import assert_problem

SITE_A, SITE_B = "LCG.A.ch", "LCG.B.de"


def pilot(site: str, n: int = 0, **extra) -> dict:
    return {"Site": site, "CPUTime": 10**7, "PilotReference": f"{site}-{n}", **extra}


def submit(client: httpx.Client, count: int, **spec) -> list[int]:
    jobs = [{"owner": "alice", "owner_group": "lhcb_mc", **spec} for _ in range(count)]
    r = client.post("/jobs", json={"jobs": jobs})
    assert r.status_code == 201, r.text
    return [j["job_id"] for j in r.json()["jobs"]]


def put_limits(client: httpx.Client, *limits: dict) -> dict:
    r = client.put("/limits", json={"limits": list(limits)})
    assert r.status_code == 200, r.text
    return r.json()


def limit(attribute: str, value: str, site: str = SITE_A, **amounts) -> dict:
    """A limit as PUT /limits takes it; `grid_ce=` among `amounts` puts it on one CE of the site."""
    return {"site": site, "attribute": attribute, "value": value, **amounts}


def match(client: httpx.Client, site: str, n: int = 0, **extra) -> httpx.Response:
    r = client.post("/match", json=pilot(site, n, **extra))
    assert r.status_code in (200, 204), r.text
    return r


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample in Prometheus text format (0 if absent)."""
    want = name + ("{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}" if labels else "")
    for line in text.splitlines():
        if line.startswith(want + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


# --- the API -----------------------------------------------------------------------------


def test_put_replaces_the_set_and_get_shows_state(client):
    assert client.get("/limits").json() == {"limits": []}
    put_limits(client, limit("JobType", "MCSimulation", running_limit=2), limit("owner", "bob", matching_delay=30))
    shown = client.get("/limits").json()["limits"]
    assert [(x["attribute"], x["value"], x["running_limit"], x["matching_delay"]) for x in shown] == [
        ("job_type", "MCSimulation", 2, None),  # DIRAC's spelling is taken and normalised
        ("owner", "bob", None, 30.0),
    ]
    assert all(x["running"] == 0 and x["last_match_at"] is None for x in shown)
    put_limits(client, limit("owner_group", "lhcb_user", SITE_B, running_limit=0))
    assert [x["value"] for x in client.get("/limits").json()["limits"]] == ["lhcb_user"]


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"limits": [limit("job_type", "MC")]}, "running_limit, matching_delay or both"),
        ({"limits": [limit("job_type", "MC", running_limit=1)] * 2}, "given twice"),
        ({"limits": [limit("job_type", "MC", running_limit=-1)]}, "greater than or equal to 0"),
        ({"limits": [limit("site_name", "MC", running_limit=1)]}, "job_type"),
        ({"limits": [limit("job_type", "MC", running_limit="2")]}, "valid integer"),
        ({"limits": [limit("job_type", "MC", matching_delay=10**9)]}, "less than or equal"),
        ({"limits": [{**limit("job_type", "MC", running_limit=1), "extra": 1}]}, "Extra inputs"),
        ({"limits": [limit("job_type", "M\x00C", running_limit=1)]}, "control characters"),
        ({}, "Field required"),
    ],
)
def test_bad_limits_are_422_and_change_nothing(client, body, fragment):
    put_limits(client, limit("job_type", "kept", running_limit=1))
    r = client.put("/limits", json=body)
    assert_problem(r, 422)
    assert fragment in r.text
    assert [x["value"] for x in client.get("/limits").json()["limits"]] == ["kept"]


# --- RunningLimit ---------------------------------------------------------------------------


def test_running_limit_refuses_the_third_match_at_that_site_only(client):
    put_limits(client, limit("job_type", "MCSimulation", running_limit=2))
    submit(client, 6, job_types=["MCSimulation"])
    mc = {"JobType": "MCSimulation"}
    assert [match(client, SITE_A, n, **mc).status_code for n in range(3)] == [200, 200, 204]
    assert match(client, SITE_B, **mc).status_code == 200  # another site is not limited
    state = client.get("/limits").json()["limits"][0]
    assert state["running"] == 2


def test_a_limited_type_gives_way_to_another_type(client):
    put_limits(client, limit("job_type", "MCSimulation", running_limit=1))
    submit(client, 3, job_types=["MCSimulation"])
    user_job = submit(client, 1, job_types=["User"])[0]
    both = {"JobType": ["MCSimulation", "User"]}
    first = match(client, SITE_A, 0, **both).json()
    second = match(client, SITE_A, 1, **both).json()
    # whichever came first, the MCSimulation slot is taken once only
    assert sorted(j["job_types"] == ["MCSimulation"] for j in (first, second)) == [False, True]
    assert user_job in {first["job_id"], second["job_id"]}
    assert match(client, SITE_A, 2, **both).status_code == 204


def test_a_slot_frees_when_a_job_ends_and_stalled_jobs_do_not_hold_one(client):
    put_limits(client, limit("owner_group", "lhcb_mc", running_limit=1))
    submit(client, 3)
    job = match(client, SITE_A).json()["job_id"]
    assert match(client, SITE_A, 1).status_code == 204
    assert client.post(f"/jobs/{job}/status", json={"status": "Running"}).status_code == 200
    assert match(client, SITE_A, 1).status_code == 204  # Running holds the slot as Matched did
    assert client.post(f"/jobs/{job}/status", json={"status": "Done"}).status_code == 200
    second = match(client, SITE_A, 2).json()["job_id"]
    assert client.post(f"/jobs/{second}/status", json={"status": "Running"}).status_code == 200
    assert client.post(f"/jobs/{second}/status", json={"status": "Stalled"}).status_code == 200
    assert match(client, SITE_A, 3).status_code == 200


def test_owner_limit_and_a_zero_limit(client):
    put_limits(client, limit("owner", "alice", running_limit=0))
    submit(client, 2)
    submit(client, 1, owner="bob")
    got = match(client, SITE_A).json()
    assert got["owner"] == "bob"
    assert match(client, SITE_A, 1).status_code == 204


def test_explain_names_the_limit_that_excludes_a_task_queue(client):
    put_limits(client, limit("job_type", "MCSimulation", running_limit=1))
    submit(client, 3, job_types=["MCSimulation"])
    submit(client, 1, job_types=["User"], owner="bob")
    both = {"JobType": ["MCSimulation", "User"]}
    match(client, SITE_A, 0, JobType="MCSimulation")
    tqs = client.post("/taskqueues/matching", json=pilot(SITE_A, **both)).json()["task_queues"]
    by_type = {tq["job_types"][0]: tq for tq in tqs}
    excluded = by_type["MCSimulation"]
    assert excluded["probability"] == 0
    assert excluded["excluded_by"] == [
        {"rule": "running_limit", "site": SITE_A, "grid_ce": "", "attribute": "job_type", "value": "MCSimulation",
         "limit": 1, "running": 1, "delay_seconds": None, "next_match_at": None}
    ]  # fmt: skip
    assert by_type["User"]["probability"] == 1 and by_type["User"]["excluded_by"] == []
    # elsewhere nothing is excluded
    elsewhere = client.post("/taskqueues/matching", json=pilot(SITE_B, **both)).json()["task_queues"]
    assert all(tq["excluded_by"] == [] for tq in elsewhere)


# --- MatchingDelay --------------------------------------------------------------------------


def test_matching_delay_spaces_matches(client):
    delay = 1.5
    put_limits(client, limit("owner_group", "lhcb_mc", matching_delay=delay))
    submit(client, 4)
    first = time.monotonic()
    assert match(client, SITE_A).status_code == 200
    assert match(client, SITE_A, 1).status_code == 204
    assert match(client, SITE_B).status_code == 200  # the delay is per site
    tq = client.post("/taskqueues/matching", json=pilot(SITE_A)).json()["task_queues"][0]
    assert tq["excluded_by"][0]["rule"] == "matching_delay"
    time.sleep(max(0.0, delay - (time.monotonic() - first)) + 0.2)
    assert match(client, SITE_A, 2).status_code == 200
    assert match(client, SITE_A, 3).status_code == 204
    last = client.get("/limits").json()["limits"][0]["last_match_at"]
    assert last is not None


# --- across replicas, and under contention -------------------------------------------------


def test_limits_hold_across_two_server_processes(client, server, server_factory):
    second = server_factory()
    other = second.client()
    put_limits(other, limit("job_type", "MCSimulation", running_limit=2), limit("owner", "carol", matching_delay=60))
    submit(client, 5, job_types=["MCSimulation"])
    submit(client, 2, owner="carol", job_types=["User"])
    got = [match(c, SITE_A, n, JobType="MCSimulation").status_code for n, c in enumerate([client, other, client])]
    assert got == [200, 200, 204]
    assert match(other, SITE_A, 5, Owner="carol", JobType="User").status_code == 200
    assert (
        match(client, SITE_A, 6, Owner="carol", JobType="User").status_code == 204
    )  # the delay set by the other replica


@pytest.mark.parametrize("grid_ce", ["", "ce1.a.ch"], ids=["site", "ce"])
def test_concurrent_pilots_on_two_replicas_never_exceed_the_limit(client, server_factory, clean, grid_ce):
    replicas = [client, server_factory().client()]
    put_limits(client, limit("job_type", "MCSimulation", running_limit=3, grid_ce=grid_ce))
    submit(client, 40, job_types=["MCSimulation"])
    results: list[int] = []
    lock = threading.Lock()
    through = {"GridCE": grid_ce} if grid_ce else {}

    def pilots(c: httpx.Client, base: int) -> None:
        for n in range(10):
            r = c.post("/match", json=pilot(SITE_A, base + n, JobType="MCSimulation", **through))
            with lock:
                results.append(r.status_code)

    threads = [threading.Thread(target=pilots, args=(replicas[i % 2], 100 * i)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(set(results)) <= [200, 204], results
    assert results.count(200) == 3
    with clean.engine().connect() as conn:
        import sqlalchemy as sa

        held = conn.execute(sa.text("SELECT count(*) FROM jobs WHERE status = 'Matched' AND site = :s"), {"s": SITE_A})
        assert held.scalar_one() == 3


# --- configuration, roles, metrics ----------------------------------------------------------


def test_configured_limits_are_created_at_start(server_factory, clean):
    configured = {SITE_B: {"running_limit": {"JobType": {"Merge": 4}}, "matching_delay": {"owner": {"bob": 5}}}}
    srv = server_factory(SITE_LIMITS=json.dumps(configured))
    shown = srv.client().get("/limits").json()["limits"]
    assert [(x["site"], x["attribute"], x["value"], x["running_limit"], x["matching_delay"]) for x in shown] == [
        (SITE_B, "job_type", "Merge", 4, None),
        (SITE_B, "owner", "bob", None, 5.0),
    ]


def test_only_admins_change_limits_and_operators_read_them(as_role):
    admin, operator, pilot_client = as_role("admin"), as_role("operator"), as_role("pilot", sub="p")
    assert admin.put("/limits", json={"limits": [limit("owner", "x", running_limit=1)]}).status_code == 200
    assert operator.get("/limits").status_code == 200
    assert_problem(operator.put("/limits", json={"limits": []}), 403)
    assert_problem(pilot_client.get("/limits"), 403)


def test_exclusions_are_counted_in_the_metrics(client, server):
    before = metric(
        httpx.get(f"{server.url}/metrics").text, "fairmatch_site_limit_exclusions_total", rule="running_limit"
    )
    put_limits(client, limit("job_type", "MCSimulation", running_limit=0))
    submit(client, 1, job_types=["MCSimulation"])
    assert match(client, SITE_A, JobType="MCSimulation").status_code == 204
    after = metric(
        httpx.get(f"{server.url}/metrics").text, "fairmatch_site_limit_exclusions_total", rule="running_limit"
    )
    assert after == before + 1


# --- limits per CE (DIRAC's RunningLimit/<site>/CEs/<CE>) -----------------------------------

CE_1, CE_2 = "ce1.a.ch", "ce2.a.ch"


def test_a_ce_limit_stops_that_ce_only(client):
    put_limits(client, limit("job_type", "MCSimulation", running_limit=2, grid_ce=CE_1))
    submit(client, 8, job_types=["MCSimulation"])
    mc = {"JobType": "MCSimulation"}
    through_ce1 = [match(client, SITE_A, n, GridCE=CE_1, **mc).status_code for n in range(3)]
    assert through_ce1 == [200, 200, 204]
    # another CE of the site, a pilot naming no CE and one naming two are not held to CE_1's limit
    assert match(client, SITE_A, 10, GridCE=CE_2, **mc).status_code == 200
    assert match(client, SITE_A, 11, **mc).status_code == 200
    assert match(client, SITE_A, 12, GridCE=[CE_1, CE_2], **mc).status_code == 200
    assert match(client, SITE_A, 3, GridCE=CE_1, **mc).status_code == 204  # their jobs do not count for CE_1
    (state,) = client.get("/limits").json()["limits"]
    assert (state["grid_ce"], state["running"]) == (CE_1, 2)


def test_a_ce_slot_frees_when_its_job_ends(client):
    put_limits(client, limit("owner", "alice", running_limit=1, grid_ce=CE_1))
    submit(client, 3)
    job = match(client, SITE_A, 0, GridCE=CE_1).json()
    assert job["owner"] == "alice"
    assert match(client, SITE_A, 1, GridCE=CE_1).status_code == 204
    for status in ("Running", "Done"):
        assert client.post(f"/jobs/{job['job_id']}/status", json={"status": status}).status_code == 200
    assert match(client, SITE_A, 2, GridCE=CE_1).status_code == 200


def test_the_site_limit_counts_the_jobs_of_every_ce(client):
    put_limits(
        client,
        limit("job_type", "MCSimulation", running_limit=3),
        limit("job_type", "MCSimulation", running_limit=2, grid_ce=CE_1),
    )
    submit(client, 8, job_types=["MCSimulation"])
    mc = {"JobType": "MCSimulation"}
    assert [match(client, SITE_A, n, GridCE=CE_1, **mc).status_code for n in range(3)] == [200, 200, 204]
    assert match(client, SITE_A, 10, GridCE=CE_2, **mc).status_code == 200  # the site's third
    assert match(client, SITE_A, 11, GridCE=CE_2, **mc).status_code == 204  # the site is full
    assert match(client, SITE_A, 12, **mc).status_code == 204
    assert match(client, SITE_B, GridCE=CE_1, **mc).status_code == 200  # a CE name at another site is another CE
    shown = {(x["site"], x["grid_ce"]): x["running"] for x in client.get("/limits").json()["limits"]}
    assert shown == {(SITE_A, ""): 3, (SITE_A, CE_1): 2}


def test_a_ce_limit_and_the_site_limit_on_one_value_each_refuse(client):
    put_limits(
        client,
        limit("owner_group", "lhcb_mc", running_limit=5),
        limit("owner_group", "lhcb_mc", running_limit=0, grid_ce=CE_2),
    )
    submit(client, 2)
    assert match(client, SITE_A, 0, GridCE=CE_2).status_code == 204
    assert match(client, SITE_A, 1, GridCE=CE_1).status_code == 200


def test_a_ce_matching_delay_spaces_that_ces_matches_only(client):
    put_limits(client, limit("owner_group", "lhcb_mc", matching_delay=600, grid_ce=CE_1))
    submit(client, 4)
    assert match(client, SITE_A, 0, GridCE=CE_1).status_code == 200
    assert match(client, SITE_A, 1, GridCE=CE_1).status_code == 204
    assert match(client, SITE_A, 2, GridCE=CE_2).status_code == 200
    assert match(client, SITE_A, 3).status_code == 200
    (state,) = client.get("/limits").json()["limits"]
    assert state["grid_ce"] == CE_1 and state["last_match_at"] is not None


def test_explain_shows_a_ce_limit_to_a_pilot_behind_that_ce_only(client):
    put_limits(client, limit("job_type", "MCSimulation", running_limit=1, grid_ce=CE_1))
    submit(client, 3, job_types=["MCSimulation"])
    assert match(client, SITE_A, 0, GridCE=CE_1, JobType="MCSimulation").status_code == 200

    def dry_run(**extra) -> dict:
        r = client.post("/taskqueues/matching", json=pilot(SITE_A, JobType="MCSimulation", **extra))
        assert r.status_code == 200, r.text
        (tq,) = r.json()["task_queues"]
        return tq

    at_ce1 = dry_run(GridCE=CE_1)
    assert at_ce1["probability"] == 0
    assert at_ce1["excluded_by"] == [
        {"rule": "running_limit", "site": SITE_A, "grid_ce": CE_1, "attribute": "job_type", "value": "MCSimulation",
         "limit": 1, "running": 1, "delay_seconds": None, "next_match_at": None}
    ]  # fmt: skip
    for elsewhere in (dry_run(GridCE=CE_2), dry_run()):
        assert elsewhere["probability"] == 1 and elsewhere["excluded_by"] == []


def test_ce_limits_through_the_api(client):
    put_limits(
        client,
        limit("JobType", "MC", running_limit=4),
        limit("JobType", "MC", running_limit=2, grid_ce=CE_1),
        limit("owner", "bob", matching_delay=5, grid_ce=CE_2),
    )
    shown = client.get("/limits").json()["limits"]
    assert [(x["grid_ce"], x["attribute"], x["value"], x["running_limit"], x["matching_delay"]) for x in shown] == [
        ("", "job_type", "MC", 4, None),  # the whole site's first
        (CE_1, "job_type", "MC", 2, None),
        (CE_2, "owner", "bob", None, 5.0),
    ]
    # a limit given as listed comes back unchanged; '' and an absent grid_ce are one key
    again = [{k: v for k, v in x.items() if k not in ("running", "last_match_at")} for x in shown]
    assert put_limits(client, *again)["limits"] == shown
    r = client.put("/limits", json={"limits": [limit("job_type", "MC", running_limit=1),
                                               limit("job_type", "MC", running_limit=2, grid_ce="")]})  # fmt: skip
    assert_problem(r, 422)
    assert "given twice" in r.text
    # null is the whole site too
    whole = put_limits(client, limit("job_type", "MC", running_limit=1, grid_ce=None))["limits"]
    assert [(x["grid_ce"], x["running_limit"]) for x in whole] == [("", 1)]
    # removing the CE's limit keeps the site's
    put_limits(client, again[0], again[2])
    assert [(x["grid_ce"], x["value"]) for x in client.get("/limits").json()["limits"]] == [("", "MC"), (CE_2, "bob")]


@pytest.mark.parametrize(
    ("grid_ce", "fragment"),
    [("ce\x001", "control characters"), ("x" * 256, "at most 255"), (" ", "blank"), (7, "valid string")],
)
def test_a_bad_grid_ce_is_422_naming_it(client, grid_ce, fragment):
    r = client.put("/limits", json={"limits": [limit("job_type", "MC", running_limit=1, grid_ce=grid_ce)]})
    body = assert_problem(r, 422)
    assert [(e["loc"], fragment in e["msg"]) for e in body["errors"]] == [(["body", "limits", 0, "grid_ce"], True)]


def test_ce_limits_in_the_configuration_file_as_dirac_nests_them(server_factory, clean, tmp_path):
    config = tmp_path / "fairmatch.toml"
    config.write_text(
        f"""
[site_limits."{SITE_A}".running_limit.JobType]
MCSimulation = 5
[site_limits."{SITE_A}".CEs."{CE_1}".running_limit.JobType]
MCSimulation = 1
[site_limits."{SITE_A}".CEs."{CE_2}".running_limit]
owner = {{bob = 3}}
[site_limits."{SITE_A}".CEs."{CE_2}".matching_delay.OwnerGroup]
lhcb_mc = 20
"""
    )
    srv = server_factory(CONFIG=str(config))
    other = srv.client()
    shown = other.get("/limits").json()["limits"]
    assert [(x["grid_ce"], x["attribute"], x["value"], x["running_limit"], x["matching_delay"]) for x in shown] == [
        ("", "job_type", "MCSimulation", 5, None),
        (CE_1, "job_type", "MCSimulation", 1, None),
        (CE_2, "owner", "bob", 3, None),
        (CE_2, "owner_group", "lhcb_mc", None, 20.0),
    ]
    submit(other, 3, job_types=["MCSimulation"])
    mc = {"JobType": "MCSimulation"}
    assert [match(other, SITE_A, n, GridCE=CE_1, **mc).status_code for n in range(2)] == [200, 204]


def test_ce_limits_from_the_command_line(client, server, cli_env, tmp_path):
    def run(*args: str) -> subprocess.CompletedProcess:
        return run_fairmatch("limits", *args, "--url", server.url, env=cli_env, cwd=tmp_path)

    def keyed(result: subprocess.CompletedProcess) -> dict:
        assert result.returncode == 0, result.stderr
        return {(e["grid_ce"], e["value"]): e["running_limit"] for e in json.loads(result.stdout)["limits"]}

    assert keyed(run("set-one", SITE_A, "JobType", "MC", "--running-limit", "4")) == {("", "MC"): 4}
    both = keyed(run("set-one", SITE_A, "JobType", "MC", "--ce", CE_1, "--running-limit", "1"))
    assert both == {("", "MC"): 4, (CE_1, "MC"): 1}
    assert keyed(run("set-one", SITE_A, "job_type", "MC", "--ce", CE_1, "--running-limit", "2")) == {
        ("", "MC"): 4, (CE_1, "MC"): 2,
    }  # fmt: skip
    missing = run("remove", SITE_A, "job_type", "MC", "--ce", CE_2)
    assert missing.returncode == 1 and f"through {CE_2}" in missing.stderr
    assert keyed(run("remove", SITE_A, "job_type", "MC", "--ce", CE_1)) == {("", "MC"): 4}
