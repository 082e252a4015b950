"""The rank and multifactor policies end to end, DIRAC 9's sum of site variants under the dirac
policy, and priority classes above every policy."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import sqlalchemy as sa
from rich.console import Console

from fairmatch.cli.priorities import sprio_table, sshare_table
from fairmatch.clock import utcnow
from fairmatch.db.tables import jobs
from tests.in_process import run_fairmatch

PILOT = {"Site": "S", "CPUTime": 10**6}
# usage of hours charged by jobs that live milliseconds: a clock skew that lets the hours through
COMPRESSED = {"JOBS__CLOCK_SKEW_SECONDS": str(2 * 10**6)}


def put_group(api, name: str, share: float, level: int = 0) -> None:
    assert api.put(f"/groups/{name}", json={"job_share": share, "priority": level}).status_code in (200, 201)


def submit(api, group: str, n: int = 1, **spec) -> list[int]:
    jobs = [{"owner": spec.pop("owner", f"{group}-user"), "owner_group": group, "vo": "vo1", **spec}] * n
    r = api.post("/jobs", json={"jobs": jobs})
    assert r.status_code == 201, r.text
    return [j["job_id"] for j in r.json()["jobs"]]


def run_to_done(api, group: str, cpu_seconds: float) -> None:
    """Usage: a job of the group runs and finishes, charging its CPU."""
    job = submit(api, group)[0]
    claimed = api.post("/match", json={**PILOT, "JobID": job})
    assert claimed.status_code == 200, claimed.text
    api.post(f"/jobs/{job}/status", json={"status": "Running"})
    done = api.post(f"/jobs/{job}/status", json={"status": "Done", "cpu_seconds": cpu_seconds})
    assert done.status_code == 200, done.text


def drain(api) -> list[str]:
    """Match until nothing is left; the owner group of each match, in order."""
    order = []
    while (r := api.post("/match", json=PILOT)).status_code == 200:
        order.append(r.json()["owner_group"])
    assert r.status_code == 204, r.text
    return order


def test_rank_matches_the_under_served_group_first(quiet_server):
    server = quiet_server(PRIORITY__POLICY="rank", **COMPRESSED)
    with server.client() as api:
        for group in ("over", "under"):
            put_group(api, group, 1000)
        run_to_done(api, "over", cpu_seconds=36_000)
        run_to_done(api, "under", cpu_seconds=1_000)
        submit(api, "over", 5)
        submit(api, "under", 5)
        api.post("/priorities/recompute")
        by_group = {tq["owner_group"]: tq for tq in api.get("/priorities").json()["task_queues"]}
        assert by_group["under"]["origin"]["rank"] > by_group["over"]["origin"]["rank"]
        assert drain(api) == ["under"] * 5 + ["over"] * 5


def test_rank_gives_a_parasitic_group_only_what_nobody_else_wants(quiet_server):
    server = quiet_server(PRIORITY__POLICY="rank", **COMPRESSED)
    with server.client() as api:
        put_group(api, "normal", 1000)
        put_group(api, "parasitic", 0, level=1000)  # no share: a high level does not lift it
        run_to_done(api, "normal", cpu_seconds=10**6)  # the share-holder is heavily over-served
        submit(api, "parasitic", 3)
        submit(api, "normal", 4)
        api.post("/priorities/recompute")
        assert drain(api) == ["normal"] * 4 + ["parasitic"] * 3


def test_rank_runs_a_parasitic_group_s_longer_jobs_only_when_no_share_holder_s_fit(quiet_server):
    """The longest CPU bucket is preferred inside a band: a shareless group's job in the
    longest bucket never takes a pilot a share-holder's shorter job fits."""
    server = quiet_server(PRIORITY__POLICY="rank", **COMPRESSED)
    with server.client() as api:
        put_group(api, "normal", 1000)
        put_group(api, "parasitic", 0)
        submit(api, "parasitic", 3, cpu_time=900_000)
        submit(api, "normal", 3, cpu_time=3600)
        api.post("/priorities/recompute")
        long_pilot = {**PILOT, "CPUTime": 2 * 10**6}  # every bucket fits it
        odds = {tq["owner_group"]: tq["probability"]
                for tq in api.post("/taskqueues/matching", json=long_pilot).json()["task_queues"]}  # fmt: skip
        assert odds == {"normal": 1.0, "parasitic": 0.0}
        order = []
        while (r := api.post("/match", json=long_pilot)).status_code == 200:
            order.append(r.json()["owner_group"])
        assert order == ["normal"] * 3 + ["parasitic"] * 3


@pytest.mark.parametrize("policy", ["dirac", "rank", "multifactor"])
def test_priority_classes_beat_every_policy(quiet_server, policy):
    server = quiet_server(PRIORITY__POLICY=policy)
    with server.client() as api:
        put_group(api, "big", 100_000, level=1000)
        put_group(api, "small", 1)
        submit(api, "big", 3)
        submit(api, "small", 2, priority_class=1)
        submit(api, "small", 1, priority_class=-1)
        api.post("/priorities/recompute")
        assert drain(api) == ["small"] * 2 + ["big"] * 3 + ["small"]


def test_multifactor_older_jobs_overtake_newer_ones_as_they_age(quiet_server, clean):
    """Same entity, same CPU bucket: the newer queue's jobs carry user priority 5, the older
    queue's 1. Fresh, the user factor decides; backdated by half of max_age (the fake clock),
    the age factor (weight 1000 * 0.5) outweighs it (weight 100 * 0.4)."""
    server = quiet_server(PRIORITY__POLICY="multifactor")
    with server.client() as api:
        old = submit(api, "g", 3, owner="ann", sites=["S", "T"], user_priority=1)
        new = submit(api, "g", 3, owner="ann", user_priority=5)
        api.post("/priorities/recompute")
        tqs = {tuple(tq["sites"]): tq for tq in api.get("/taskqueues").json()["task_queues"]}
        assert tqs[()]["priority"] > tqs[("S", "T")]["priority"]
        first = api.post("/match", json=PILOT).json()["job_id"]
        assert first in new
        api.post(f"/jobs/{first}/status", json={"status": "Waiting"})

        with clean.engine().begin() as conn:  # the fake clock: these jobs were submitted 3.5 days ago
            _backdate(conn, old, days=3.5)
        api.post("/priorities/recompute")
        tqs = {tuple(tq["sites"]): tq for tq in api.get("/taskqueues").json()["task_queues"]}
        age = tqs[("S", "T")]["priority_origin"]["factors"]["age"]
        assert age["value"] == pytest.approx(0.5, abs=0.01) and age["weight"] == 1000
        assert tqs[("S", "T")]["priority"] > tqs[()]["priority"]
        assert api.post("/match", json=PILOT).json()["job_id"] in old


def test_multifactor_takes_the_fair_share_of_the_account_a_job_is_charged_to(quiet_server):
    """Slurm's rule, with an imported tree: alice's jobs of one group charged 500,000 s to
    `physics`; her queue charged to `physics` gets that association's factor, her queue of the
    same group charged to `theory` the untouched one's, and the matcher follows."""
    tree = "root|1|||\nphysics|1|root||\nphysics|1||alice|\ntheory|1|root||\ntheory|1||alice|\n"
    server = quiet_server(PRIORITY__POLICY="multifactor", **COMPRESSED)
    with server.client() as api:
        assert api.put("/associations", content=tree.encode(), headers={"content-type": "text/plain"}).is_success
        (used,) = submit(api, "lhcb_user", owner="alice", account="physics")
        assert api.post("/match", json={**PILOT, "JobID": used}).json()["job_id"] == used
        api.post(f"/jobs/{used}/status", json={"status": "Running"})
        done = {"status": "Done", "cpu_seconds": 500_000.0, "wall_seconds": 500_000.0}
        assert api.post(f"/jobs/{used}/status", json=done).status_code == 200
        physics = submit(api, "lhcb_user", 2, owner="alice", account="physics")
        theory = submit(api, "lhcb_user", 2, owner="alice", account="theory")
        assert api.post("/priorities/recompute").status_code == 200

        queues = {tq["account"]: tq for tq in api.get("/taskqueues").json()["task_queues"]}
        assert set(queues) == {"physics", "theory"}
        assert {tq["owner_group"] for tq in queues.values()} == {"lhcb_user"}
        associations = api.get("/associations/usage").json()["associations"]
        expected = {row["account"]: row["fairshare"] for row in associations if row["user"] == "alice"}
        assert expected["physics"] < expected["theory"]
        for account, tq in queues.items():
            assert tq["priority_origin"]["account"] == account
            assert tq["priority_origin"]["factors"]["fairshare"]["value"] == pytest.approx(expected[account])
        assert queues["theory"]["priority"] > queues["physics"]["priority"]
        explained = {tq["account"] for tq in api.get("/priorities").json()["task_queues"]}
        assert explained == {"physics", "theory"}
        first = [api.post("/match", json=PILOT).json()["job_id"] for _ in range(2)]
        assert sorted(first) == sorted(theory)
        assert api.post("/match", json=PILOT).json()["job_id"] in physics


def _backdate(conn, job_ids: list[int], days: float) -> None:
    conn.execute(sa.update(jobs).where(jobs.c.id.in_(job_ids)).values(submitted_at=utcnow() - timedelta(days=days)))


@pytest.mark.parametrize("policy", ["dirac", "rank", "multifactor"])
def test_sprio_and_sshare_commands_explain_the_last_run(private_server_factory, tmp_path, policy):
    # a database of its own: the session's default server would redo the priorities with its
    # own policy whenever its loop comes round, between this test's run and its reading
    server = private_server_factory(PRIORITY__POLICY=policy, PRIORITY__INTERVAL_SECONDS="3600")
    with server.client() as api:
        put_group(api, "g", 1000)
        submit(api, "g", 2, owner="ann")
        submit(api, "h", 1, owner="bob")
        api.post("/priorities/recompute")
    config = tmp_path / "empty.toml"
    config.write_text("")
    env = {"PATH": "/usr/bin:/bin", "FAIRMATCH_CONFIG": str(config)}

    def run(*args):
        done = run_fairmatch(*args, "--url", server.url, env=env, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    sprio = run("sprio", "--jobs", "10")
    assert sprio["policy"] == policy and len(sprio["task_queues"]) == 2 and len(sprio["jobs"]) == 3
    assert all(tq["origin"]["policy"] == policy for tq in sprio["task_queues"])
    sshare = run("sshare")
    assert sshare["policy"] == policy and len(sshare["task_queue_priorities"]) == 2
    if policy == "multifactor":
        assert {(n["account"], n["user"]) for n in sshare["associations"]} >= {("g", "ann"), ("h", "bob")}
    console = Console(width=160, record=True)
    console.print(sprio_table(sprio))
    console.print(sshare_table(sshare))
    text = console.export_text()
    assert "ann" in text and "bob" in text


# --- dirac: a workflow split over site-restricted queues keeps its weight at each site ----------

CERN, CNAF, RAL = "LCG.CERN.cern", "LCG.CNAF.it", "LCG.RAL.uk"


def submit_site_variants(api) -> None:
    """alice (alone in lhcb, share 1200) has four queues of average real priority 1: 300 each.
    Three are one MCSimulation workflow at different sites (two restricted, one banning a
    site); the fourth is another workflow (User jobs)."""
    put_group(api, "lhcb", 1200)
    submit(api, "lhcb", 2, owner="alice", job_types=["MCSimulation"], sites=[CERN])
    submit(api, "lhcb", 1, owner="alice", job_types=["MCSimulation"], sites=[CNAF])
    submit(api, "lhcb", 1, owner="alice", job_types=["MCSimulation"], banned_sites=[RAL])
    submit(api, "lhcb", 1, owner="alice", job_types=["User"])


def by_workflow(api) -> dict[tuple, dict]:
    tqs = api.get("/taskqueues").json()["task_queues"]
    return {(*tq["job_types"], *tq["sites"], *(f"not {s}" for s in tq["banned_sites"])): tq for tq in tqs}


def test_dirac_gives_each_site_variant_of_a_workflow_the_sum_of_their_priorities(quiet_server):
    with quiet_server().client() as api:
        submit_site_variants(api)
        assert api.post("/priorities/recompute").status_code == 200
        tqs = by_workflow(api)
        variants = [tqs[("MCSimulation", CERN)], tqs[("MCSimulation", CNAF)], tqs[("MCSimulation", f"not {RAL}")]]
        ids = sorted(tq["task_queue_id"] for tq in variants)
        for tq in variants:  # 300 + 300 + 300
            assert tq["priority"] == pytest.approx(900)
            origin = tq["priority_origin"]
            assert origin["own_priority"] == pytest.approx(300)
            assert origin["variants"] == {"task_queues": ids, "count": 3, "summed": True}
        assert tqs[("User",)]["priority"] == pytest.approx(300)
        assert tqs[("User",)]["priority_origin"]["variants"]["count"] == 1
        # sprio and the dry run explain it the same way
        sprio = api.get("/priorities").json()
        explained = {tq["task_queue_id"]: tq for tq in sprio["task_queues"]}
        assert explained[ids[0]]["origin"]["variants"]["summed"] is True
        assert explained[ids[0]]["priority"] == pytest.approx(900)
        console = Console(width=200, record=True)
        console.print(sprio_table(sprio))
        assert console.export_text().count("3 summed") == 3
        dry = api.post(
            "/taskqueues/matching", json={"Site": CERN, "CPUTime": 10**6, "JobType": ["MCSimulation", "User"]}
        )
        assert dry.status_code == 200, dry.text
        at_cern = {tq["task_queue_id"]: tq for tq in dry.json()["task_queues"]}
        cern = tqs[("MCSimulation", CERN)]["task_queue_id"]
        assert at_cern[cern]["priority_origin"]["variants"]["count"] == 3
        # at CERN, alice's MC workflow weighs 900 against her User queue's 300 (the banning
        # variant is eligible too: 900 + 900 + 300)
        assert at_cern[cern]["probability"] == pytest.approx(900 / 2100, rel=1e-3)


def test_dirac_without_the_sum_keeps_each_variant_its_own_priority(server_factory, clean):
    server = server_factory(PRIORITY__SUM_SITE_VARIANTS="false", PRIORITY__INTERVAL_SECONDS="3600")
    with server.client() as api:
        submit_site_variants(api)
        assert api.post("/priorities/recompute").status_code == 200
        tqs = by_workflow(api)
        assert {key: tq["priority"] for key, tq in tqs.items()} == pytest.approx(
            {("MCSimulation", CERN): 300, ("MCSimulation", CNAF): 300, ("MCSimulation", f"not {RAL}"): 300,
             ("User",): 300}
        )  # fmt: skip
        assert tqs[("User",)]["priority_origin"]["variants"]["summed"] is False
        assert tqs[("MCSimulation", CERN)]["priority_origin"]["variants"] == {
            "task_queues": sorted(tq["task_queue_id"] for key, tq in tqs.items() if key[0] == "MCSimulation"),
            "count": 3,
            "summed": False,
        }
