"""Site limits over real HTTP (DIRAC's Limiter): RunningLimit and MatchingDelay
per site × attribute × value, kept in the database so that every replica enforces them."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

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


def test_concurrent_pilots_on_two_replicas_never_exceed_the_limit(client, server_factory, clean):
    replicas = [client, server_factory().client()]
    put_limits(client, limit("job_type", "MCSimulation", running_limit=3))
    submit(client, 40, job_types=["MCSimulation"])
    results: list[int] = []
    lock = threading.Lock()

    def pilots(c: httpx.Client, base: int) -> None:
        for n in range(10):
            r = c.post("/match", json=pilot(SITE_A, base + n, JobType="MCSimulation"))
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
